// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests of the draftfs core's option parsing and ID mapping: the
 * accepted spellings (overlayfs / fuse-overlayfs / mount(8) helper form),
 * the one-line errors, and the fuse-overlayfs meaning of uidmapping=.
 */
#include <errno.h>
#include <string.h>

#include "ovl.h"
#include "tap.h"

static int parse(struct ovl_options *o, char *err, const char *a1, const char *a2, const char *a3, const char *a4)
{
	char *argv[6] = { (char *)"draftfs", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL };
	int argc = 1;

	while (argc < 5 && argv[argc])
		argc++;
	memset(o, 0, sizeof(*o));
	err[0] = '\0';
	return ovl_options_parse(argc, argv, o, err, 256);
}

static void test_basic(void)
{
	struct ovl_options o;
	char err[256];
	int r;

	r = parse(&o, err, "-o", "lowerdir=/a:/b:/c,upperdir=/u,workdir=/w", "/mnt", NULL);
	is_int(r, 0, "basic options parse");
	is_int(o.n_lower, 3, "three lower layers");
	is_str(o.lowerdirs[0], "/a", "leftmost lower is on top");
	is_str(o.lowerdirs[2], "/c", "rightmost lower is at the bottom");
	is_str(o.upperdir, "/u", "upperdir");
	is_str(o.workdir, "/w", "workdir");
	is_str(o.mountpoint, "/mnt", "mountpoint");
	ok(!o.foreground, "background by default");
	ovl_options_free(&o);

	/* mount.fuse3 form: SOURCE MOUNTPOINT -o OPTIONS, with generic mount options */
	r = parse(&o, err, "mysrc", "/mnt", "-o",
		  "rw,nosuid,nodev,noatime,auto,nofail,_netdev,x-systemd.automount,lowerdir=/l,upperdir=/u,workdir=/w");
	is_int(r, 0, "mount helper form parses: %s", err);
	is_str(o.source, "mysrc", "source becomes fsname");
	ok(o.fuse_opts && strstr(o.fuse_opts, "nosuid") && strstr(o.fuse_opts, "noatime"), "kernel flags passed on");
	ok(o.fuse_opts && !strstr(o.fuse_opts, "nofail") && !strstr(o.fuse_opts, "x-systemd"), "fstab-only options dropped");
	ovl_options_free(&o);

	r = parse(&o, err, "-f", "-olowerdir=/l,upperdir=/u,workdir=/w,timeout=2.5,statedir=/s", "/m", NULL);
	is_int(r, 0, "joined -o and -f");
	ok(o.foreground, "-f sets foreground");
	ok(o.timeout > 2.4 && o.timeout < 2.6, "timeout parsed");
	is_str(o.statedir, "/s", "statedir");
	is_int(o.passthrough, OVL_PT_ALL, "passthrough defaults to all");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,passthrough=upper", "/m", NULL);
	is_int(r, 0, "passthrough=upper parses: %s", err);
	is_int(o.passthrough, OVL_PT_UPPER, "passthrough=upper");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,passthrough=0", "/m", NULL);
	is_int(r, 0, "passthrough=0 parses: %s", err);
	is_int(o.passthrough, OVL_PT_OFF, "passthrough=0 is off");
	is_int(o.uring, OVL_URING_AUTO, "uring defaults to auto");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,uring=off", "/m", NULL);
	is_int(r, 0, "uring=off parses: %s", err);
	is_int(o.uring, OVL_URING_OFF, "uring=off");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,uring", "/m", NULL);
	is_int(r, 0, "bare uring parses: %s", err);
	is_int(o.uring, OVL_URING_ON, "bare uring is on");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,uring=on,uring=auto", "/m", NULL);
	is_int(r, 0, "uring=on,uring=auto parses: %s", err);
	is_int(o.uring, OVL_URING_AUTO, "the last uring= wins");
	ok(o.metacopy, "metacopy defaults to on");
	ok(o.ring_sched_idle, "ring_sched defaults to idle");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,ring_sched=normal", "/m", NULL);
	is_int(r, 0, "ring_sched=normal parses: %s", err);
	ok(!o.ring_sched_idle, "ring_sched=normal");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,ring_sched=normal,ring_sched=idle", "/m", NULL);
	is_int(r, 0, "ring_sched=normal,ring_sched=idle parses: %s", err);
	ok(o.ring_sched_idle, "the last ring_sched= wins");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,ring_sched", "/m", NULL);
	ok(r < 0, "bare ring_sched is refused");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,metacopy=off", "/m", NULL);
	is_int(r, 0, "metacopy=off parses: %s", err);
	ok(!o.metacopy, "metacopy=off");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,metacopy=off,metacopy", "/m", NULL);
	is_int(r, 0, "metacopy=off,metacopy parses: %s", err);
	ok(o.metacopy, "bare metacopy is on, the last one wins");
	ok(o.bgfill == (uint64_t)64 << 20, "bgfill defaults to 64M");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,bgfill=1G", "/m", NULL);
	is_int(r, 0, "bgfill=1G parses: %s", err);
	ok(o.bgfill == (uint64_t)1 << 30, "bgfill=1G is 1 GiB");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,bgfill=0", "/m", NULL);
	is_int(r, 0, "bgfill=0 parses: %s", err);
	ok(o.bgfill == 0, "bgfill=0 turns it off");
	ovl_options_free(&o);
}

static void test_errors(void)
{
	struct ovl_options o;
	char err[256];
	int r;

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,bogus=1", "/m", NULL);
	is_int(r, -EINVAL, "unknown option rejected");
	ok(strstr(err, "'bogus=1'") != NULL, "error names the option: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,metacopy=maybe", "/m", NULL);
	is_int(r, -EINVAL, "metacopy=maybe rejected");
	ok(strstr(err, "metacopy 'maybe'") != NULL, "error names the value: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,bgfill=-1", "/m", NULL);
	is_int(r, -EINVAL, "bgfill=-1 rejected");
	ok(strstr(err, "bgfill '-1'") != NULL, "error names the value: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,bgfill=64X", "/m", NULL);
	is_int(r, -EINVAL, "bgfill=64X rejected");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "upperdir=/u,workdir=/w", "/m", NULL);
	is_int(r, -EINVAL, "missing lowerdir rejected");
	ok(strstr(err, "lowerdir") != NULL, "error names lowerdir: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/a::/b,upperdir=/u,workdir=/w", "/m", NULL);
	is_int(r, -EINVAL, "empty layer rejected");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w", NULL, NULL);
	is_int(r, -EINVAL, "missing mountpoint rejected");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,uidmapping=1:2", "/m", NULL);
	is_int(r, -EINVAL, "short uidmapping rejected");
	ok(strstr(err, "uidmapping") != NULL, "error names uidmapping: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,timeout=-1", "/m", NULL);
	is_int(r, -EINVAL, "negative timeout rejected");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,passthrough=some", "/m", NULL);
	is_int(r, -EINVAL, "bad passthrough value rejected");
	ok(strstr(err, "'some'") != NULL, "error quotes the value: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,uring=maybe", "/m", NULL);
	is_int(r, -EINVAL, "bad uring value rejected");
	ok(strstr(err, "invalid uring 'maybe'") != NULL, "error quotes the value: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,acl=maybe", "/m", NULL);
	is_int(r, -EINVAL, "bad acl value rejected");
	ok(strstr(err, "invalid acl 'maybe': expected on or off") != NULL, "error quotes the value: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w", "/m", NULL);
	is_int(r, 0, "defaults parse");
	ok(o.acl, "acl on by default");
	ok(o.xino, "xino auto by default");
	ovl_options_free(&o);
	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,noacl", "/m", NULL);
	is_int(r, 0, "noacl parses");
	ok(!o.acl, "noacl (fuse-overlayfs' spelling) turns ACLs off");
	ovl_options_free(&o);
	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,acl=off", "/m", NULL);
	is_int(r, 0, "acl=off parses");
	ok(!o.acl, "acl=off turns ACLs off");
	ovl_options_free(&o);

	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,xino=off", "/m", NULL);
	is_int(r, 0, "xino=off parses");
	ok(!o.xino, "xino=off turns it off");
	ovl_options_free(&o);
	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,xino=on", "/m", NULL);
	ok(r == 0 && o.xino, "xino=on is auto");
	ovl_options_free(&o);
	r = parse(&o, err, "-o", "lowerdir=/l,upperdir=/u,workdir=/w,xino=maybe", "/m", NULL);
	is_int(r, -EINVAL, "bad xino value rejected");
	ok(strstr(err, "invalid xino 'maybe': expected auto, on or off") != NULL, "error quotes the value: %s", err);
	ovl_options_free(&o);

	r = parse(&o, err, "-x", "-o", "lowerdir=/l,upperdir=/u,workdir=/w", "/m");
	is_int(r, -EINVAL, "unknown flag rejected");
	ovl_options_free(&o);
}

static void test_idmap(void)
{
	struct ovl_idmap m = { 0 };

	is_int(ovl_idmap_parse("1000:10384:1", &m), 0, "single range");
	is_int(m.n, 1, "one range");
	/* fuse-overlayfs: first field is the id in the layers, second the id in the view */
	is_int(ovl_idmap_to_view(&m, 1000), 10384, "disk owner shows as the view uid");
	is_int(ovl_idmap_to_disk(&m, 10384), 1000, "view uid is stored as the disk owner");
	is_int(ovl_idmap_to_view(&m, 5), 5, "unmapped disk ids pass through");
	is_int(ovl_idmap_to_disk(&m, 7), 7, "unmapped view ids pass through");

	is_int(ovl_idmap_parse("0:100000:65536:65536:0:1", &m), 0, "two ranges");
	is_int(ovl_idmap_to_view(&m, 0), 100000, "first range start");
	is_int(ovl_idmap_to_view(&m, 65535), 165535, "first range end");
	is_int(ovl_idmap_to_view(&m, 65536), 0, "second range");
	is_int(ovl_idmap_to_disk(&m, 165535), 65535, "reverse of the first range");

	ok(ovl_idmap_parse("", &m) < 0, "empty rejected");
	ok(ovl_idmap_parse("1:2:0", &m) < 0, "zero length rejected");
	ok(ovl_idmap_parse("1:2:3:4", &m) < 0, "incomplete triple rejected");
	ok(ovl_idmap_parse("a:2:3", &m) < 0, "non-number rejected");
	ok(ovl_idmap_parse("-1:2:3", &m) < 0, "negative rejected");
	ok(ovl_idmap_parse("4294967295:0:2", &m) < 0, "overflowing range rejected");
	ok(ovl_idmap_parse("0:10:5:3:20:5", &m) < 0, "overlapping disk ranges rejected");
	ok(ovl_idmap_parse("0:10:5:30:12:5", &m) < 0, "overlapping view ranges rejected");
	free(m.r);
}

static void test_private_xattrs(void)
{
	ok(ovl_xattr_is_private("trusted.overlay.opaque"), "trusted.overlay.* is private");
	ok(ovl_xattr_is_private("trusted.draftbox.origin"), "trusted.draftbox.* is private");
	ok(!ovl_xattr_is_private("trusted.overlayx"), "a look-alike is not");
	ok(!ovl_xattr_is_private("user.overlay.opaque"), "user.* is not");
}

static void test_origin_format(void)
{
	struct stat st = { 0 };
	char buf[256];

	st.st_dev = 2049;
	st.st_ino = 123456;
	st.st_size = 42;
	st.st_mtim.tv_sec = 1700000000;
	st.st_mtim.tv_nsec = 5;
	st.st_ctim.tv_sec = 1700000001;
	st.st_ctim.tv_nsec = 123456789;
	st.st_mode = S_IFREG | 0644;
	ovl_origin_format(buf, sizeof(buf), 1, &st);
	is_str(buf, "v1 layer=1 dev=2049 ino=123456 size=42 mtime=1700000000.000000005 ctime=1700000001.123456789 mode=100644",
	       "origin record format");
}

int main(void)
{
	test_basic();
	test_errors();
	test_idmap();
	test_private_xattrs();
	test_origin_format();
	return tap_done();
}
