package hw

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// FileTarget is a file read with O_DIRECT (falling back to the page cache
// where the file system refuses it, which Info reports) through
// engine/stream's FileSource — the same reader tier C uses.
type FileTarget struct {
	src *stream.FileSource
}

// OpenFile opens path for a sweep whose blocks are at most maxBlock bytes
// and whose queue depth is at most maxDepth: one FileSource read of a block
// is then exactly one pread, and maxDepth of them can be in flight.
func OpenFile(path string, maxBlock, maxDepth int, log hclog.Logger) (*FileTarget, error) {
	src, err := stream.OpenFile(path, stream.FileOptions{ChunkBytes: maxBlock, QueueDepth: maxDepth, Logger: log})
	if err != nil {
		return nil, err
	}
	return &FileTarget{src: src}, nil
}

// Info implements bench.Target.
func (f *FileTarget) Info() bench.TargetInfo {
	return bench.TargetInfo{Kind: "file", Name: f.src.Path(), Size: f.src.Size(), Align: f.src.Align(), Direct: f.src.Direct()}
}

// NewWorker implements bench.Target: a page-aligned buffer of bs bytes.
func (f *FileTarget) NewWorker(i, bs int) (bench.Worker, error) {
	buf, err := stream.AllocAligned(bs)
	if err != nil {
		return nil, err
	}
	return &fileWorker{src: f.src, buf: buf, bs: bs}, nil
}

// Close closes the file.
func (f *FileTarget) Close() error { return f.src.Close() }

type fileWorker struct {
	src *stream.FileSource
	buf *tier.Buffer
	bs  int
}

func (w *fileWorker) Read(ctx context.Context, off int64) error {
	return w.src.ReadAt(ctx, w.buf.Bytes()[:w.bs], off)
}

func (w *fileWorker) Close() error { return w.buf.Free() }

var _ bench.Target = (*FileTarget)(nil)

// fileStager reads a file into staging slots for an end-to-end route.
type fileStager struct {
	src   *stream.FileSource
	slots [][]byte
}

func (s *fileStager) Size() int64 { return s.src.Size() }
func (s *fileStager) Align() int  { return s.src.Align() }
func (s *fileStager) Read(ctx context.Context, slot int, off int64, n int) error {
	if n > len(s.slots[slot]) {
		return fmt.Errorf("read of %d bytes into a %d-byte slot", n, len(s.slots[slot]))
	}
	return s.src.ReadAt(ctx, s.slots[slot][:n], off)
}
