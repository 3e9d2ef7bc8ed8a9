package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/nvme/volume"
)

// volumeImage converts a GGUF into a prefab pool (its weights' type kept),
// formats a namespace image of 4 KiB blocks as a strata volume and stores
// the pool on it as extent -name, as `strata devices pool write` would on
// the device. It prints shell assignments (models_*): the extent's byte offset on the
// namespace and, for -fault-layer, the 512-byte sector (QEMU blkdebug's
// unit) one block into that layer's extent.
func volumeImage(args []string) error {
	fs := flag.NewFlagSet("volume", flag.ContinueOnError)
	src := fs.String("gguf", "", "model to prefab")
	pool := fs.String("pool", "", "pool file to write")
	img := fs.String("img", "", "namespace image to write")
	name := fs.String("name", "", "extent name")
	layer := fs.Int("fault-layer", -1, "print the sector one block into this layer's extent")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *src == "" || *pool == "" || *img == "" || *name == "" {
		return fmt.Errorf("volume needs -gguf, -pool, -img and -name")
	}
	g, err := gguf.Map(*src)
	if err != nil {
		return err
	}
	err = prefab.WritePool(g, *pool, prefab.Options{Type: prefab.TypeKeep})
	g.Close()
	if err != nil {
		return err
	}
	p, err := prefab.OpenPool(*pool)
	if err != nil {
		return err
	}
	defer p.Close()
	pf, err := os.Open(*pool)
	if err != nil {
		return err
	}
	defer pf.Close()
	st, err := pf.Stat()
	if err != nil {
		return err
	}
	f, err := os.Create(*img)
	if err != nil {
		return err
	}
	defer f.Close()
	// The pool, the volume's superblocks and tables, and slack, in whole MiB.
	size := (st.Size()/(1<<20) + 9) << 20
	if err := f.Truncate(size); err != nil {
		return err
	}
	dev, err := volume.NewFileDevice(f, 4096)
	if err != nil {
		return err
	}
	ctx := context.Background()
	v, err := volume.Format(ctx, dev, volume.FormatOptions{Label: "testbed-models"})
	if err != nil {
		return err
	}
	e, err := v.WriteFile(ctx, *name, pf, st.Size())
	if err != nil {
		return err
	}
	if err := v.Verify(ctx, e); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	fmt.Printf("models_img_bytes=%d\nmodels_extent_offset=%d\n", size, e.Offset)
	if *layer >= 0 {
		if *layer >= p.NumLayers() {
			return fmt.Errorf("-fault-layer %d: the pool has %d layers", *layer, p.NumLayers())
		}
		le := p.Extent(*layer)
		fmt.Printf("models_fault_sector=%d\nmodels_fault_layer=%d\n", (e.Offset+le.Offset+4096)/512, *layer)
	}
	return nil
}
