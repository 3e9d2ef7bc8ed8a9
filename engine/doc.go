// Package engine ties a model file to a runnable model: it maps the GGUF
// (or prefab pool), builds the tokenizer from its metadata and loads the
// weights onto a backend that runs batched forward passes. OpenWith also picks the backend (the GPU through engine/gpu
// when CUDA is usable, else the CPU reference engine/model, or whichever
// Options.Backend forces), places the layers with the tier planner
// (engine/tier) and streams those that do not fit the memory budgets:
// over PCIe from pinned host memory on the GPU, through the pipeline
// (engine/stream) on the CPU, once per batched pass. Passes go through
// one interface, Backend, over engine/model's Step, so the one decode loop
// (internal/daemon/sched's scheduler, which the daemon and `strata run` both drive)
// runs the same way on either.
package engine
