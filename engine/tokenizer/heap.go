package tokenizer

// bigram is a merge candidate that knows which of two candidates merges
// first: lowest rank for BPE (llama.cpp's llm_bigram_bpe order), highest
// score for SentencePiece, the leftmost on ties in both.
type bigram[T any] interface{ less(T) bool }

// heapPush and heapPop keep a binary min-heap of merge candidates ordered by
// less. Both tokenizers pop the best candidate and push its new neighbours
// in a loop, so a slice-backed heap without interface boxing is worth its
// few lines over container/heap.
func heapPush[T bigram[T]](h *[]T, x T) {
	a := append(*h, x)
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
	*h = a
}

func heapPop[T bigram[T]](h *[]T) T {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(a) {
			break
		}
		m := l
		if r := l + 1; r < len(a) && a[r].less(a[l]) {
			m = r
		}
		if !a[m].less(a[i]) {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}
