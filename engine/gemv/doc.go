// Package gemv is the CPU as a compute device for matrix-vector products:
// quantized GEMV (and the small batched GEMM that batches and verify passes
// need) over every weight format strata reads, at memory speed.
//
// The vector is quantized once per product (X): 256-element blocks, one
// float32 scale each, 12-bit integers stored in int16 lanes, and the
// integer sums of every 32 of them. A quantized weight row is then dotted
// with it in integer arithmetic: every per-block integer sum is exact, and
// the few float operations per 256-element block run in one fixed order.
// That order is the contract (ref.go says it per format): the pure-Go
// reference implements it, the AVX2 and AVX-512 kernels implement it
// again in assembly, and the tests require the same bits from both. Twelve
// bits keep the vector's own rounding far below the weights' (an NMSE near
// 1e-7 a product, against quant.Dot's float32 reference), where eight bits,
// the usual choice, would add about 4e-5.
//
// F16, BF16 and F32 rows take the float path: the weights are widened to
// float32 and fused-multiply-added with the float vector; those kernels
// match the reference within a stated tolerance, not bit for bit.
//
// A prompt's tokens take the tile path where the CPU has Intel AMX
// (RowsTiled; engine/model decides which rows): weights widened to
// bfloat16 once a panel and multiplied with 16 vectors a tile instruction,
// the vector split in two bfloat16 parts; its results are within stated
// bounds of the exact product, not the integer path's bits (tiles.go).
//
// The kernels are generated Go assembly (avo, in ./asm); which ones run is
// chosen once from the CPU's features (Detect), and the pure-Go reference
// is the fallback on every other machine. Multi-threading is the caller's:
// a kernel computes a range of rows, a stride apart (a view of some
// columns of a wider matrix is rows a full row apart), and allocates
// nothing.
package gemv
