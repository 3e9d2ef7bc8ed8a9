// Package volume lays out a strata-managed NVMe namespace, so that model
// pools live on a raw SSD without a filesystem and without `dd`: a
// superblock, an extent table that names each stored file (a prefab pool,
// or any other blob) and says where its bytes lie, and the extents
// themselves, 4 KiB aligned so that a layer is one sequential DMA.
//
// On-disk format, version 1 (all integers little-endian; "unit" = 4 KiB):
//
//	byte 0      superblock copy 0 (4 KiB)
//	byte 4096   superblock copy 1 (4 KiB)
//	byte 8192   extent table slot 0 (TableBytes)
//	   …        extent table slot 1 (TableBytes)
//	DataOffset  extents, each starting on a unit boundary
//
// A superblock holds a magic, the format version, the device block size,
// the namespace size, the geometry above, the generation, the location,
// length and xxh3 checksum of the current extent table, a label, and an
// xxh3 checksum of itself. Every change writes the new table into the slot
// the current generation does not use, then the superblock copy of the new
// generation: a crash at any point leaves the older generation intact, and
// Open picks the newest copy whose checksums hold. Each extent records its
// length and the xxh3 of its bytes, so a read can be verified end to end.
//
// The package works over any BlockDevice: NVMe (the userspace driver, see
// NewNVMe) in production, a file in tests.
package volume
