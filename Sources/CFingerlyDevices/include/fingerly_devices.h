#ifndef FINGERLY_DEVICES_H
#define FINGERLY_DEVICES_H

// libudev and libblkid are opened on the first call into them (udev_loader.c, blkid_loader.c): only the
// deferred tier's device probes use them. Each answers why its library cannot be used, or NULL once it
// is loaded; the first call is the one that tries.
const char *fingerly_udev_problem(void);
const char *fingerly_blkid_problem(void);

#endif
