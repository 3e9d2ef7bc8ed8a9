package gemv

//go:generate sh -c "cd asm && go run . -out ../zkernels_amd64.s -stubs ../zkernels_amd64.go -pkg gemv"
