/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The OCI image layer format of a change list: a POSIX (pax) tar where a
 * deleted entry is an empty file ".wh.NAME" in its directory and a directory
 * that replaces the lower one wholesale carries ".wh..wh..opq" followed by
 * its full content. Applying it to a copy of lower, following the OCI
 * image-spec rules, gives the merged view.
 */
#pragma once

#include "diff.h"

/*
 * Writes the layer tar of @c to @fd (content read from @env's layers). Returns 0, or -errno
 * and *ret_error: "refused" for a name the format cannot hold (a file named ".wh.*"), "io".
 */
int ovl_layertar_write(const struct ovl_ctl_env *env, const struct ovl_changes *c, int fd, cJSON **ret_error);
