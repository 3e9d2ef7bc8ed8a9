package gpu

import "time"

// DefaultHandoffSpin is how long the engine lets kernels/cudadrv's Device.Do
// hand-offs spin before they sleep (Device.SetSpin). A resident decode step
// takes a few milliseconds, and waking a sleeping goroutine through the
// scheduler and a futex (an inter-processor interrupt on a VM) adds tens
// of microseconds to each hand-off, a few percent of the step. Spinning
// for longer than a step
// keeps both the caller and the device goroutine awake while a generation
// runs, at the cost of a busy core on each side, and lets them sleep 20 ms
// after the last call: the trade the CUDA driver's own default scheduling
// (spin while there are fewer contexts than cores) makes for its waits.
const DefaultHandoffSpin = 20 * time.Millisecond
