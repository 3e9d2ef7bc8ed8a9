package vfio

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Group is a VFIO group (/dev/vfio/N): the smallest set of devices the IOMMU
// can isolate from the rest of the system. Its devices can be opened only
// once the group is viable (every device in it bound to vfio-pci or to no
// driver) and attached to a container.
type Group struct {
	num       int
	mu        sync.Mutex
	fd        int
	container *Container
}

// GroupStatus is VFIO_GROUP_GET_STATUS.
type GroupStatus struct {
	// Viable: every device of the group is bound to a VFIO driver or none.
	Viable bool
	// ContainerSet: the group is attached to a container.
	ContainerSet bool
}

// OpenGroup opens /dev/vfio/N. ErrNoDevice when the node does not exist (no
// device of the group is bound to vfio-pci).
func OpenGroup(n int) (*Group, error) {
	if n < 0 {
		return nil, fmt.Errorf("IOMMU group %d: %w", n, ErrNoDevice)
	}
	fd, err := openDev(fmt.Sprintf("/dev/vfio/%d", n), ErrNoDevice)
	if err != nil {
		return nil, err
	}
	return &Group{num: n, fd: fd}, nil
}

// Number is the IOMMU group number.
func (g *Group) Number() int { return g.num }

// Status is VFIO_GROUP_GET_STATUS.
func (g *Group) Status() (GroupStatus, error) {
	s := groupStatus{Argsz: uint32(unsafe.Sizeof(groupStatus{}))}
	if _, err := ioctl(g.fd, ioctlGroupGetStatus, unsafe.Pointer(&s), 0); err != nil {
		return GroupStatus{}, fmt.Errorf("VFIO_GROUP_GET_STATUS on group %d: %w", g.num, err)
	}
	return GroupStatus{Viable: s.Flags&groupFlagsViable != 0, ContainerSet: s.Flags&groupFlagsContainerSet != 0}, nil
}

// SetContainer attaches the group to c (VFIO_GROUP_SET_CONTAINER). The group
// must be viable. When c's IOMMU is already set, the valid IOVA ranges are
// re-read, since this group's devices may reserve more of them.
func (g *Group) SetContainer(c *Container) error {
	st, err := g.Status()
	if err != nil {
		return err
	}
	if !st.Viable {
		return fmt.Errorf("IOMMU group %d is not viable: bind every device in /sys/kernel/iommu_groups/%d/devices to vfio-pci", g.num, g.num)
	}
	fd := int32(c.fd)
	if _, err := ioctl(g.fd, ioctlGroupSetContainer, unsafe.Pointer(&fd), 0); err != nil {
		return fmt.Errorf("VFIO_GROUP_SET_CONTAINER on group %d: %w", g.num, err)
	}
	g.mu.Lock()
	g.container = c
	g.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.groups = append(c.groups, g)
	if c.iommuSet {
		return c.refreshLocked()
	}
	return nil
}

// UnsetContainer detaches the group from its container. Devices of the group
// must be closed first.
func (g *Group) UnsetContainer() error {
	g.mu.Lock()
	c := g.container
	g.container = nil
	closed := g.fd < 0
	g.mu.Unlock()
	if c == nil || closed {
		return nil
	}
	c.mu.Lock()
	for i, x := range c.groups {
		if x == g {
			c.groups = append(c.groups[:i], c.groups[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if _, err := ioctl(g.fd, ioctlGroupUnsetContainer, nil, 0); err != nil {
		return fmt.Errorf("VFIO_GROUP_UNSET_CONTAINER on group %d: %w", g.num, err)
	}
	return nil
}

// OpenDevice returns the device bdf of this group (VFIO_GROUP_GET_DEVICE_FD;
// the kernel resets the device, which takes ~150 ms under QEMU). The group
// must be attached to a container whose IOMMU is set.
func (g *Group) OpenDevice(bdf string) (*Device, error) {
	canon, err := ParseBDF(bdf)
	if err != nil {
		return nil, err
	}
	name := append([]byte(canon), 0)
	fd, err := ioctl(g.fd, ioctlGroupGetDeviceFD, unsafe.Pointer(&name[0]), 0)
	if err != nil {
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("VFIO_GROUP_GET_DEVICE_FD(%s) on group %d: %v: %w", canon, g.num, err, ErrNoDevice)
		}
		return nil, fmt.Errorf("VFIO_GROUP_GET_DEVICE_FD(%s) on group %d: %w", canon, g.num, err)
	}
	d, err := newDevice(fd, canon)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return d, nil
}

// Close detaches the group from its container and closes it.
func (g *Group) Close() error {
	err := g.UnsetContainer()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd >= 0 {
		if cerr := unix.Close(g.fd); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing group %d: %w", g.num, cerr))
		}
		g.fd = -1
	}
	return err
}
