# SPDX-License-Identifier: LGPL-2.1-or-later
"""Free page reporting held back while the suite runs, where the VM's kernel lets it.

A virtio-balloon guest with free page reporting hands free memory back to
the host in passes about 2 s apart; the host drops it, and the next page
the guest allocates there is faulted in again by the host, which the guest
sees as its own system time. Every workload starts with `drop_caches`, which
frees the page cache of the one before: read at once, big.bin took 0.45 s
here; read 6 s after the drop, when the passes had handed that memory back,
2.0 s, all of it system time. Whether a workload ran before or after a pass
decided its time more than the file system did, and not evenly: kernel
overlayfs lost the most (seq_write 2.33 s with reporting, 0.58 s held back).

This machine's kernel has a `min_free_ms` parameter for page reporting:
memory is reported only once it has been free that long. The suite sets it
above a workload's length for its run and puts the old value back at the
end (not after a SIGKILL: then it stays until someone writes it back or
the VM reboots), so the memory a drop frees stays the guest's and every
implementation allocates from the same warm pool. Kernels without the parameter are left
alone (said in the report's header).
"""
import os

PARAMS = "/sys/module/page_reporting/parameters"
HOLD_MS = 300000  # 5 min, the most this kernel takes: past any workload here (read_all, the longest, < 1 min)


def _read(name):
    with open(os.path.join(PARAMS, name)) as f:
        return f.read().strip()


def _write(name, value):
    with open(os.path.join(PARAMS, name), "w") as f:
        f.write("%s\n" % value)


class Hold:
    """hold() sets min_free_ms to HOLD_MS; release() restores it. state says what was done, for the report."""

    def __init__(self):
        self.old = None
        self.state = "no free page reporting"

    def hold(self, log):
        if not os.path.isdir(PARAMS):
            return
        try:
            old = _read("min_free_ms")
        except OSError:
            self.state = "free page reporting without min_free_ms: not held (expect the host's page faults)"
            return
        err = None
        for ms in (HOLD_MS, 60000):  # a kernel with a lower ceiling refuses the first with EINVAL
            try:
                _write("min_free_ms", ms)
                break
            except OSError as e:
                err = e
        else:
            self.state = "free page reporting: could not hold it (%s)" % err.strerror
            log(self.state)
            return
        self.old = old
        self.state = "free page reporting held (min_free_ms %s -> %d)" % (old, ms)
        log("%s for the run; put back at the end" % self.state)

    def release(self, log):
        if self.old is None:
            return
        try:
            _write("min_free_ms", self.old)
            self.old = None
        except OSError as e:
            log("could not put back page_reporting min_free_ms=%s: %s" % (self.old, e.strerror))
