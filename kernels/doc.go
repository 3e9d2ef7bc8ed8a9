// Package kernels will hold strata's CUDA C sources, their embedded PTX, the
// purego binding to libcuda.so.1 and typed launch wrappers (issue 5). Not
// implemented yet; the CPU reference in engine/model is what those kernels
// will be tested against.
package kernels
