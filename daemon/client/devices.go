package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/strata-llm/strata/daemon/api"
)

// Devices lists the host's NVMe controllers as the daemon sees them.
func (c *Client) Devices(ctx context.Context) (api.DeviceList, error) {
	var l api.DeviceList
	return l, c.getJSON(ctx, http.MethodGet, api.PathDevices, nil, &l)
}

// DeviceStats returns the counters of the controllers the daemon holds,
// or of the one at bdf when bdf is not empty.
func (c *Client) DeviceStats(ctx context.Context, bdf string) (api.DeviceStats, error) {
	var s api.DeviceStats
	path := api.PathDeviceStats
	if bdf != "" {
		path += "?" + url.Values{"bdf": {bdf}}.Encode()
	}
	return s, c.getJSON(ctx, http.MethodGet, path, nil, &s)
}

// Bind asks the daemon to take the controller at bdf from the host and
// open it (admin only).
func (c *Client) Bind(ctx context.Context, bdf string) (api.BindResponse, error) {
	var b api.BindResponse
	return b, c.getJSON(ctx, http.MethodPost, api.PathDeviceBind, api.BindRequest{BDF: bdf}, &b)
}

// Unbind asks the daemon to close the controller at bdf and give it to a
// kernel driver ("" means nvme) (admin only).
func (c *Client) Unbind(ctx context.Context, bdf, driver string) (api.UnbindResponse, error) {
	var u api.UnbindResponse
	return u, c.getJSON(ctx, http.MethodPost, api.PathDeviceUnbind, api.UnbindRequest{BDF: bdf, Driver: driver}, &u)
}

// ResetDevice asks the daemon to reset the controller at bdf, which it
// keeps holding; commands in flight are submitted again (admin only).
func (c *Client) ResetDevice(ctx context.Context, bdf string) (api.ResetResponse, error) {
	var r api.ResetResponse
	return r, c.getJSON(ctx, http.MethodPost, api.PathDeviceReset, api.ResetRequest{BDF: bdf}, &r)
}

// Volume returns the strata volume on a namespace of a held controller
// and its extents.
func (c *Client) Volume(ctx context.Context, bdf string, nsid int) (api.VolumeInfo, error) {
	var v api.VolumeInfo
	q := url.Values{"bdf": {bdf}, "nsid": {strconv.Itoa(nsid)}}
	return v, c.getJSON(ctx, http.MethodGet, api.PathVolume+"?"+q.Encode(), nil, &v)
}

// FormatVolume writes a new, empty strata volume on a namespace (admin
// only).
func (c *Client) FormatVolume(ctx context.Context, r api.FormatRequest) (api.VolumeInfo, error) {
	var v api.VolumeInfo
	return v, c.getJSON(ctx, http.MethodPost, api.PathVolumeFormat, r, &v)
}

// WritePool stores a prefab pool file, which must lie in one of the
// daemon's model directories, on a namespace's volume (admin only).
func (c *Client) WritePool(ctx context.Context, r api.PoolWriteRequest) (api.PoolWriteResponse, error) {
	var p api.PoolWriteResponse
	return p, c.getJSON(ctx, http.MethodPost, api.PathPoolWrite, r, &p)
}
