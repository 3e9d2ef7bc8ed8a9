package volume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/zeebo/xxh3"
)

// Format constants.
const (
	Magic           = "STRATAV1"
	Version         = 1
	Unit            = 4096 // alignment of every structure and extent
	superBytes      = Unit
	tableOffset     = 2 * Unit
	defaultTable    = 1 << 20
	maxNameLen      = 255
	entryFixed      = 2 + 8 + 8 + 8 + 8 + 8 // name length, offset, length, reserved, checksum, created
	tableHeader     = 16
	superChecksumAt = superBytes - 8
)

// Errors, matched with errors.Is.
var (
	// ErrNotFormatted means no valid superblock was found.
	ErrNotFormatted = errors.New("volume: not a strata volume")
	// ErrCorrupt means a structure failed its checksum or a bounds check.
	ErrCorrupt = errors.New("volume: corrupt")
	// ErrNotFound means no extent has the name.
	ErrNotFound = errors.New("volume: no such extent")
	// ErrExists means an extent with the name exists already.
	ErrExists = errors.New("volume: extent exists")
	// ErrNoSpace means no free run of units is large enough.
	ErrNoSpace = errors.New("volume: no space")
	// ErrChecksum means an extent's bytes do not match its checksum.
	ErrChecksum = errors.New("volume: checksum mismatch")
)

// BlockDevice is the storage under a volume. Offsets are in blocks; p's
// length is a multiple of BlockSize. Buffers from Alloc move without a
// copy (they are DMA-mapped for NVMe); other memory may be copied through
// a bounce buffer.
type BlockDevice interface {
	BlockSize() int
	Blocks() uint64
	ReadBlocks(ctx context.Context, lba uint64, p []byte) error
	WriteBlocks(ctx context.Context, lba uint64, p []byte) error
	Flush(ctx context.Context) error
	// Alloc returns page-aligned memory of n bytes suited to the device,
	// and the function that frees it.
	Alloc(n int) ([]byte, func() error, error)
}

// Extent is one named file stored in the volume.
type Extent struct {
	Name     string
	Offset   int64  // byte offset on the namespace, a multiple of Unit
	Length   int64  // bytes of data
	Reserved int64  // bytes allocated: Length rounded up to Unit
	Checksum uint64 // xxh3 of the Length data bytes
	Created  time.Time
}

// End is the first byte past the allocation.
func (e Extent) End() int64 { return e.Offset + e.Reserved }

// Superblock is the decoded superblock.
type Superblock struct {
	Version    uint32
	BlockSize  uint32
	Size       int64 // namespace bytes at format time
	TableBytes int64 // size of each table slot
	DataOffset int64
	Generation uint64
	TableLen   int64 // encoded table bytes in the current slot
	TableSum   uint64
	Label      string
}

func (s Superblock) tableSlot(gen uint64) int64 {
	return tableOffset + int64(gen%2)*s.TableBytes
}

func (s Superblock) marshal() []byte {
	b := make([]byte, superBytes)
	le := binary.LittleEndian
	copy(b, Magic)
	le.PutUint32(b[8:], s.Version)
	le.PutUint32(b[12:], s.BlockSize)
	le.PutUint64(b[16:], uint64(s.Size))
	le.PutUint64(b[24:], uint64(s.TableBytes))
	le.PutUint64(b[32:], uint64(s.DataOffset))
	le.PutUint64(b[40:], s.Generation)
	le.PutUint64(b[48:], uint64(s.TableLen))
	le.PutUint64(b[56:], s.TableSum)
	b[64] = byte(len(s.Label))
	copy(b[65:], s.Label)
	le.PutUint64(b[superChecksumAt:], xxh3.Hash(b[:superChecksumAt]))
	return b
}

// ParseSuperblock decodes and checks a superblock copy.
func ParseSuperblock(b []byte) (Superblock, error) {
	if len(b) < superBytes {
		return Superblock{}, fmt.Errorf("%w: superblock is %d bytes", ErrCorrupt, len(b))
	}
	if string(b[:8]) != Magic {
		return Superblock{}, ErrNotFormatted
	}
	le := binary.LittleEndian
	if sum := le.Uint64(b[superChecksumAt:]); sum != xxh3.Hash(b[:superChecksumAt]) {
		return Superblock{}, fmt.Errorf("%w: superblock checksum", ErrCorrupt)
	}
	s := Superblock{
		Version: le.Uint32(b[8:]), BlockSize: le.Uint32(b[12:]), Size: int64(le.Uint64(b[16:])),
		TableBytes: int64(le.Uint64(b[24:])), DataOffset: int64(le.Uint64(b[32:])),
		Generation: le.Uint64(b[40:]), TableLen: int64(le.Uint64(b[48:])), TableSum: le.Uint64(b[56:]),
	}
	s.Label = string(b[65 : 65+min(int(b[64]), 128)])
	switch {
	case s.Version != Version:
		return s, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, s.Version, Version)
	case s.BlockSize < 512 || s.BlockSize > Unit || s.BlockSize&(s.BlockSize-1) != 0:
		return s, fmt.Errorf("%w: block size %d", ErrCorrupt, s.BlockSize)
	case s.TableBytes < Unit || s.TableBytes%Unit != 0 || s.TableBytes > 1<<30:
		return s, fmt.Errorf("%w: table size %d", ErrCorrupt, s.TableBytes)
	case s.DataOffset != tableOffset+2*s.TableBytes:
		return s, fmt.Errorf("%w: data offset %d", ErrCorrupt, s.DataOffset)
	case s.Size < s.DataOffset || s.Size%Unit != 0:
		return s, fmt.Errorf("%w: size %d", ErrCorrupt, s.Size)
	case s.TableLen < tableHeader || s.TableLen > s.TableBytes:
		return s, fmt.Errorf("%w: table length %d", ErrCorrupt, s.TableLen)
	}
	return s, nil
}

// marshalTable encodes the extent table.
func marshalTable(es []Extent) []byte {
	le := binary.LittleEndian
	b := make([]byte, tableHeader)
	le.PutUint32(b, uint32(len(es)))
	for _, e := range es {
		var f [entryFixed]byte
		le.PutUint16(f[0:], uint16(len(e.Name)))
		le.PutUint64(f[2:], uint64(e.Offset))
		le.PutUint64(f[10:], uint64(e.Length))
		le.PutUint64(f[18:], uint64(e.Reserved))
		le.PutUint64(f[26:], e.Checksum)
		le.PutUint64(f[34:], uint64(e.Created.UnixNano()))
		b = append(b, f[:]...)
		b = append(b, e.Name...)
	}
	return b
}

// ParseTable decodes an extent table and checks every entry against the
// volume geometry: names valid and unique, extents aligned, inside the data
// area and not overlapping.
func ParseTable(b []byte, s Superblock) ([]Extent, error) {
	if len(b) < tableHeader {
		return nil, fmt.Errorf("%w: table of %d bytes", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	n := int(le.Uint32(b))
	if n > (len(b)-tableHeader)/entryFixed {
		return nil, fmt.Errorf("%w: table claims %d extents in %d bytes", ErrCorrupt, n, len(b))
	}
	es := make([]Extent, 0, n)
	names := map[string]bool{}
	p := b[tableHeader:]
	for i := 0; i < n; i++ {
		if len(p) < entryFixed {
			return nil, fmt.Errorf("%w: table entry %d truncated", ErrCorrupt, i)
		}
		nl := int(le.Uint16(p))
		e := Extent{Offset: int64(le.Uint64(p[2:])), Length: int64(le.Uint64(p[10:])),
			Reserved: int64(le.Uint64(p[18:])), Checksum: le.Uint64(p[26:]),
			Created: time.Unix(0, int64(le.Uint64(p[34:]))).UTC()}
		p = p[entryFixed:]
		if nl > len(p) {
			return nil, fmt.Errorf("%w: table entry %d name truncated", ErrCorrupt, i)
		}
		e.Name = string(p[:nl])
		p = p[nl:]
		if err := checkName(e.Name); err != nil {
			return nil, fmt.Errorf("%w: table entry %d: %v", ErrCorrupt, i, err)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%w: name %q appears twice", ErrCorrupt, e.Name)
		}
		names[e.Name] = true
		if e.Offset < s.DataOffset || e.Offset%Unit != 0 || e.Length < 0 || e.Reserved%Unit != 0 ||
			e.Reserved != hostmem.AlignUp(e.Length, Unit) ||
			e.Offset > s.Size || e.Reserved > s.Size-e.Offset {
			return nil, fmt.Errorf("%w: extent %q at %d+%d (reserved %d) outside the data area", ErrCorrupt, e.Name, e.Offset, e.Length, e.Reserved)
		}
		es = append(es, e)
	}
	sorted := slices.Clone(es)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Offset < sorted[j].Offset })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Offset < sorted[i-1].End() {
			return nil, fmt.Errorf("%w: extents %q and %q overlap", ErrCorrupt, sorted[i-1].Name, sorted[i].Name)
		}
	}
	return es, nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > maxNameLen:
		return fmt.Errorf("name of %d bytes (at most %d)", len(name), maxNameLen)
	case !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\n"):
		return fmt.Errorf("name %q is not printable UTF-8", name)
	}
	return nil
}

// Volume is an open strata volume. Its methods are safe for concurrent
// use; writes to the table are serialized.
type Volume struct {
	dev BlockDevice
	mu  sync.Mutex
	sb  Superblock
	ext []Extent
}

// FormatOptions configure Format.
type FormatOptions struct {
	// TableBytes is the size of each extent table slot (default 1 MiB:
	// about 17000 extents with short names).
	TableBytes int64
	Label      string
}

// Format writes an empty volume over the whole device. Whatever the device
// held is lost.
func Format(ctx context.Context, dev BlockDevice, o FormatOptions) (*Volume, error) {
	bs := dev.BlockSize()
	if bs < 512 || bs > Unit || Unit%bs != 0 {
		return nil, fmt.Errorf("volume: block size %d unsupported (512 … 4096)", bs)
	}
	if o.TableBytes == 0 {
		o.TableBytes = defaultTable
	}
	if o.TableBytes%Unit != 0 || o.TableBytes < Unit {
		return nil, fmt.Errorf("volume: table size %d is not a positive multiple of %d", o.TableBytes, Unit)
	}
	if len(o.Label) > 128 {
		return nil, fmt.Errorf("volume: label of %d bytes (at most 128)", len(o.Label))
	}
	size := int64(dev.Blocks()) * int64(bs) / Unit * Unit
	sb := Superblock{Version: Version, BlockSize: uint32(bs), Size: size, TableBytes: o.TableBytes,
		DataOffset: tableOffset + 2*o.TableBytes, Label: o.Label}
	if size < sb.DataOffset+Unit {
		return nil, fmt.Errorf("volume: device of %d bytes is too small for a %d-byte table", size, o.TableBytes)
	}
	v := &Volume{dev: dev, sb: sb}
	// Invalidate both superblock copies first, so a crash mid-format does
	// not leave an old volume that looks valid.
	if err := v.writeBytes(ctx, 0, make([]byte, 2*superBytes)); err != nil {
		return nil, fmt.Errorf("volume: format: %w", err)
	}
	if err := v.commit(ctx, nil, 0); err != nil {
		return nil, fmt.Errorf("volume: format: %w", err)
	}
	if err := v.commit(ctx, nil, 1); err != nil {
		return nil, fmt.Errorf("volume: format: %w", err)
	}
	return v, nil
}

// Open reads the newest valid superblock and its extent table.
func Open(ctx context.Context, dev BlockDevice) (*Volume, error) {
	v := &Volume{dev: dev}
	raw := make([]byte, 2*superBytes)
	if err := v.readBytes(ctx, 0, raw); err != nil {
		return nil, fmt.Errorf("volume: reading superblocks: %w", err)
	}
	var best *Superblock
	var firstErr error
	for i := 0; i < 2; i++ {
		sb, err := ParseSuperblock(raw[i*superBytes:])
		if err == nil && sb.Generation%2 != uint64(i) {
			err = fmt.Errorf("%w: superblock copy %d has generation %d", ErrCorrupt, i, sb.Generation)
		}
		if err == nil {
			var es []Extent
			if es, err = v.loadTable(ctx, sb); err == nil && (best == nil || sb.Generation > best.Generation) {
				best = &sb
				v.ext = es
			}
		}
		if err != nil && firstErr == nil && !errors.Is(err, ErrNotFormatted) {
			firstErr = err
		}
	}
	if best == nil {
		if firstErr != nil {
			return nil, firstErr
		}
		return nil, ErrNotFormatted
	}
	if int64(best.BlockSize) != int64(dev.BlockSize()) {
		return nil, fmt.Errorf("%w: formatted with %d-byte blocks, device has %d", ErrCorrupt, best.BlockSize, dev.BlockSize())
	}
	if best.Size > int64(dev.Blocks())*int64(dev.BlockSize()) {
		return nil, fmt.Errorf("%w: volume of %d bytes on a %d-byte device", ErrCorrupt, best.Size, int64(dev.Blocks())*int64(dev.BlockSize()))
	}
	v.sb = *best
	return v, nil
}

func (v *Volume) loadTable(ctx context.Context, sb Superblock) ([]Extent, error) {
	n := hostmem.AlignUp(sb.TableLen, Unit)
	b := make([]byte, n)
	if err := v.readBytes(ctx, sb.tableSlot(sb.Generation), b); err != nil {
		return nil, fmt.Errorf("volume: reading extent table: %w", err)
	}
	b = b[:sb.TableLen]
	if xxh3.Hash(b) != sb.TableSum {
		return nil, fmt.Errorf("%w: extent table checksum (generation %d)", ErrCorrupt, sb.Generation)
	}
	return ParseTable(b, sb)
}

// commit writes es as generation gen: table slot, flush, superblock copy,
// flush. The caller holds mu (or owns v exclusively).
func (v *Volume) commit(ctx context.Context, es []Extent, gen uint64) error {
	tb := marshalTable(es)
	if int64(len(tb)) > v.sb.TableBytes {
		return fmt.Errorf("%w: extent table needs %d bytes, slot has %d", ErrNoSpace, len(tb), v.sb.TableBytes)
	}
	sb := v.sb
	sb.Generation, sb.TableLen, sb.TableSum = gen, int64(len(tb)), xxh3.Hash(tb)
	padded := make([]byte, hostmem.AlignUp(len(tb), Unit))
	copy(padded, tb)
	if err := v.writeBytes(ctx, sb.tableSlot(gen), padded); err != nil {
		return fmt.Errorf("writing extent table: %w", err)
	}
	if err := v.dev.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := v.writeBytes(ctx, int64(gen%2)*superBytes, sb.marshal()); err != nil {
		return fmt.Errorf("writing superblock: %w", err)
	}
	if err := v.dev.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	v.sb, v.ext = sb, es
	return nil
}

// Superblock returns the current superblock.
func (v *Volume) Superblock() Superblock { v.mu.Lock(); defer v.mu.Unlock(); return v.sb }

// Device returns the block device under the volume.
func (v *Volume) Device() BlockDevice { return v.dev }

// Extents lists the stored extents by offset.
func (v *Volume) Extents() []Extent {
	v.mu.Lock()
	defer v.mu.Unlock()
	es := slices.Clone(v.ext)
	sort.Slice(es, func(i, j int) bool { return es[i].Offset < es[j].Offset })
	return es
}

// Lookup returns the extent called name.
func (v *Volume) Lookup(name string) (Extent, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.ext {
		if e.Name == name {
			return e, nil
		}
	}
	return Extent{}, fmt.Errorf("%w: %q", ErrNotFound, name)
}

// Free is the number of unallocated data bytes.
func (v *Volume) Free() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	used := int64(0)
	for _, e := range v.ext {
		used += e.Reserved
	}
	return v.sb.Size - v.sb.DataOffset - used
}

// allocate finds the first gap of n bytes (n a multiple of Unit).
func (v *Volume) allocate(n int64) (int64, error) {
	es := slices.Clone(v.ext)
	sort.Slice(es, func(i, j int) bool { return es[i].Offset < es[j].Offset })
	at := v.sb.DataOffset
	for _, e := range es {
		if e.Offset-at >= n {
			return at, nil
		}
		at = max(at, e.End())
	}
	if v.sb.Size-at >= n {
		return at, nil
	}
	return 0, fmt.Errorf("%w: no free run of %d bytes", ErrNoSpace, n)
}

// copyChunk is the size of one write while storing a file.
const copyChunk = 1 << 20

// WriteFile stores size bytes from r as a new extent called name: it
// allocates the space, writes the data (zero-padded to a unit), checks
// that r held exactly size bytes, and only then commits the table, so a
// failed write leaves the volume as it was.
func (v *Volume) WriteFile(ctx context.Context, name string, r io.Reader, size int64) (Extent, error) {
	if err := checkName(name); err != nil {
		return Extent{}, fmt.Errorf("volume: %w", err)
	}
	if size < 0 {
		return Extent{}, fmt.Errorf("volume: negative size %d", size)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.ext {
		if e.Name == name {
			return Extent{}, fmt.Errorf("%w: %q", ErrExists, name)
		}
	}
	reserved := hostmem.AlignUp(size, Unit)
	off, err := v.allocate(reserved)
	if err != nil {
		return Extent{}, err
	}
	buf, free, err := v.dev.Alloc(copyChunk)
	if err != nil {
		return Extent{}, fmt.Errorf("volume: write %q: %w", name, err)
	}
	defer free()
	h := xxh3.New()
	for done := int64(0); done < reserved; {
		n := min(int64(copyChunk), reserved-done)
		chunk := buf[:n]
		data := min(n, size-done)
		if _, err := io.ReadFull(r, chunk[:data]); err != nil {
			return Extent{}, fmt.Errorf("volume: write %q: reading source at %d: %w", name, done, err)
		}
		clear(chunk[data:])
		h.Write(chunk[:data])
		if err := v.writeBytes(ctx, off+done, chunk); err != nil {
			return Extent{}, fmt.Errorf("volume: write %q at %d: %w", name, done, err)
		}
		done += n
	}
	if n, _ := r.Read(make([]byte, 1)); n != 0 {
		return Extent{}, fmt.Errorf("volume: write %q: source is longer than %d bytes", name, size)
	}
	e := Extent{Name: name, Offset: off, Length: size, Reserved: reserved, Checksum: h.Sum64(), Created: time.Now().UTC()}
	es := append(slices.Clone(v.ext), e)
	if err := v.commit(ctx, es, v.sb.Generation+1); err != nil {
		return Extent{}, fmt.Errorf("volume: write %q: %w", name, err)
	}
	return e, nil
}

// Delete removes the extent called name; its space is reused by later
// writes.
func (v *Volume) Delete(ctx context.Context, name string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	i := slices.IndexFunc(v.ext, func(e Extent) bool { return e.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	es := slices.Delete(slices.Clone(v.ext), i, i+1)
	if err := v.commit(ctx, es, v.sb.Generation+1); err != nil {
		return fmt.Errorf("volume: delete %q: %w", name, err)
	}
	return nil
}

// ReadAt reads len(p) bytes of extent e at byte offset off (any alignment)
// and returns io.EOF, with the bytes that exist, when the range passes the
// extent's end.
func (v *Volume) ReadAt(ctx context.Context, e Extent, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("volume: read %q at negative offset %d", e.Name, off)
	}
	if off >= e.Length {
		return 0, io.EOF
	}
	n := min(int64(len(p)), e.Length-off)
	if err := v.readBytes(ctx, e.Offset+off, p[:n]); err != nil {
		return 0, fmt.Errorf("volume: read %q at %d: %w", e.Name, off, err)
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// Verify reads the whole extent and checks its checksum.
func (v *Volume) Verify(ctx context.Context, e Extent) error {
	buf, free, err := v.dev.Alloc(copyChunk)
	if err != nil {
		return err
	}
	defer free()
	h := xxh3.New()
	for done := int64(0); done < e.Length; {
		n := min(int64(copyChunk), e.Reserved-done)
		if err := v.readBytes(ctx, e.Offset+done, buf[:n]); err != nil {
			return fmt.Errorf("volume: verify %q at %d: %w", e.Name, done, err)
		}
		h.Write(buf[:min(n, e.Length-done)])
		done += n
	}
	if got := h.Sum64(); got != e.Checksum {
		return fmt.Errorf("%w: extent %q has xxh3 %016x, table says %016x", ErrChecksum, e.Name, got, e.Checksum)
	}
	return nil
}

// Reader returns an io.ReaderAt over extent e (context.Background), for
// code that wants a plain reader.
func (v *Volume) Reader(e Extent) io.ReaderAt { return extentReader{v, e} }

type extentReader struct {
	v *Volume
	e Extent
}

func (r extentReader) ReadAt(p []byte, off int64) (int, error) {
	return r.v.ReadAt(context.Background(), r.e, p, off)
}

// readBytes reads any byte range of the device, going through a bounce
// buffer for the unaligned head and tail.
func (v *Volume) readBytes(ctx context.Context, off int64, p []byte) error {
	bs := int64(v.dev.BlockSize())
	if off%bs == 0 && int64(len(p))%bs == 0 {
		return v.dev.ReadBlocks(ctx, uint64(off/bs), p)
	}
	start := off / bs * bs
	end := hostmem.AlignUp(off+int64(len(p)), bs)
	for at := start; at < end; {
		n := min(end-at, copyChunk)
		tmp, free, err := v.dev.Alloc(int(n))
		if err != nil {
			return err
		}
		err = v.dev.ReadBlocks(ctx, uint64(at/bs), tmp[:n])
		if err == nil {
			lo, hi := max(at, off), min(at+n, off+int64(len(p)))
			copy(p[lo-off:hi-off], tmp[lo-at:hi-at])
		}
		free()
		if err != nil {
			return err
		}
		at += n
	}
	return nil
}

// writeBytes writes a block-aligned range.
func (v *Volume) writeBytes(ctx context.Context, off int64, p []byte) error {
	bs := int64(v.dev.BlockSize())
	if off%bs != 0 || int64(len(p))%bs != 0 {
		return fmt.Errorf("volume: unaligned write of %d bytes at %d", len(p), off)
	}
	return v.dev.WriteBlocks(ctx, uint64(off/bs), p)
}
