package blocktrace

// The BPF object and its Go loader are generated from blocktrace.bpf.c and
// committed, so building strata needs no clang. Regenerating needs clang
// (Debian's clang 14 works) and libbpf's headers (libbpf-dev).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel,bpfeb -type devstats -type issued blocktrace blocktrace.bpf.c
