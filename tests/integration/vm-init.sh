#!/bin/busybox sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# /init of the throwaway VM that vmutil.py boots (busybox sh). Stage 1 runs
# on the initramfs and moves everything to a tmpfs, because bubblewrap's
# pivot_root(2) cannot leave the initramfs; stage 2 mounts a pure cgroup v2
# hierarchy (no v1 controller exists in this VM) and runs each case of
# /cases, printing for every case its exit status, its JSON result and its
# output between markers on the serial console, then powers off.
#
# /cases: one case per line, "NAME<TAB>SHELL COMMAND"; the command sees
# $RUN (draftbox-run with the common options) and $TRY (try-syscall as the
# sandbox sees it). A command that does not use $RUN reports on the VM
# itself (its processes, its cgroups).
export PATH=/bin:/usr/bin:/sbin:/usr/sbin

if [ "$1" != stage2 ]; then
	/bin/busybox --install -s /bin
	mount -t devtmpfs dev /dev
	mkdir -p /newroot
	mount -t tmpfs -o size=512m,mode=0755 root /newroot
	for d in /*; do
		case "$d" in /newroot|/proc|/sys|/dev) ;; *) cp -a "$d" /newroot/ ;; esac
	done
	mkdir -p /newroot/proc /newroot/sys /newroot/dev
	mount --move /dev /newroot/dev
	exec switch_root /newroot /init stage2
fi

mount -t proc proc /proc
mount -t sysfs sys /sys
for m in /modules/*.ko; do
	case "$m" in
	*-brd.ko) insmod "$m" rd_nr=1 rd_size=2097152 ;; # /dev/ram0, 2 GiB, allocated as written
	*.ko) [ -e "$m" ] && insmod "$m" ;;
	esac
done
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /tmp /run /ws /state /dev/shm
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=0755 run /run
chmod 0777 /ws
chmod 0700 /state
ip link set lo up

echo "DBXVM-KERNEL $(uname -r)"
echo "DBXVM-CONTROLLERS $(cat /sys/fs/cgroup/cgroup.controllers)"

# Like a service under systemd, the launcher does not start in the root cgroup.
mkdir /sys/fs/cgroup/service
echo $$ > /sys/fs/cgroup/service/cgroup.procs

BIN=/opt/db
TRY_DEST=/run/dbx-test/try-syscall
RUN="$BIN/launcher/draftbox-run --workspace /ws --state-dir /state --json-fd 3 --allow $BIN/tests/integration --expose $BIN/tests/integration/try-syscall:$TRY_DEST"
TRY=$TRY_DEST
export RUN TRY

tab=$(printf '\t')
while IFS="$tab" read -r name cmd; do
	[ -n "$name" ] || continue
	echo "DBXVM-BEGIN $name"
	start=$(cut -d' ' -f1 /proc/uptime)
	: > /tmp/json
	sh -c "$cmd" 3>/tmp/json >/tmp/out 2>/tmp/err </dev/null
	rc=$?
	end=$(cut -d' ' -f1 /proc/uptime)
	echo "DBXVM-RC $rc"
	echo "DBXVM-SECONDS $start $end"
	echo "DBXVM-JSON $(tr -d '\n' < /tmp/json)"
	echo "DBXVM-STDOUT $(base64 -w 0 < /tmp/out)"
	echo "DBXVM-STDERR $(base64 -w 0 < /tmp/err)"
	echo "DBXVM-END $name"
done < /cases

echo "DBXVM-DONE"
sync
poweroff -f
