package cpubench

//go:generate sh -c "cd asm && go run . -out ../zread_amd64.s -stubs ../zread_amd64.go -pkg cpubench"
