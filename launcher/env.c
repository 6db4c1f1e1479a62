/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The sandbox environment. It is built here, before bwrap starts, and
 * handed to bwrap as --clearenv and --setenv options (bwrap itself is
 * exec'd with an empty environment, so its loader, running as root on the
 * host, never sees a variable meant for the sandbox): nothing filtered out
 * ever reaches a process in the sandbox, not even through /proc/1/environ.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "macro.h"

/*
 * Inherited names that carry credentials, matched case-insensitively. The
 * list errs on the side of holding back: a variable held back by mistake
 * can be passed on purpose (--setenv, the API's envs), a secret that got
 * through cannot be taken back.
 */
static const char *const default_deny[] = {
	/* keys, tokens, passwords and the like, by the usual names */
	"*_KEY", "*_KEYS", "*_KEY_*", "*APIKEY*", "*API_KEY*", "*PRIVATE_KEY*",
	"*TOKEN", "*TOKENS", "*_TOKEN_*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*_PASS", "*_PWD", "*_PAT",
	"*CREDENTIAL*", "*_AUTH", "*_AUTH_*", "*COOKIE*",
	/* connection strings, which often hold a password (and see has_url_password) */
	"*_DSN", "*DATABASE_URL*", "*CONNECTION_STRING*",
	/* clouds, clusters, vaults */
	"AWS_*", "AZURE_*", "CLOUDSDK_*", "ALI_*", "ALIYUN_*", "K8S_*", "KUBE_*", "KUBECONFIG", "VAULT_*",
	/* the host user's agents */
	"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS",
	/* the loader */
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
	NULL
};

/* Names the launcher sets itself; a host value never passes. */
static const char *const redirected[] = {
	"HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME",
	NULL
};

static bool match_any(const char *name, const char *const *globs)
{
	for (; globs && *globs; globs++)
		if (fnmatch(*globs, name, FNM_CASEFOLD) == 0)
			return true;
	return false;
}

/* Whether @value holds a URL with a password in it ("scheme://user:pass@host"), whatever its name. */
static bool has_url_password(const char *value)
{
	for (const char *p = strstr(value, "://"); p; p = strstr(p + 3, "://")) {
		const char *auth = p + 3, *at = memrchr(auth, '@', strcspn(auth, "/?#"));

		if (at && memchr(auth, ':', (size_t)(at - auth)))
			return true;
	}
	return false;
}

bool launch_env_default_denied(const char *name, const char *value)
{
	return match_any(name, default_deny) || (value && has_url_password(value));
}

/* Index of @name in @env, or -1. */
static ssize_t env_find(char **env, const char *name, size_t len)
{
	for (size_t i = 0; env && env[i]; i++)
		if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
			return (ssize_t)i;
	return -1;
}

/* Sets "K=V" (@kv) in @env, replacing an existing K. */
static int env_put(char ***env, const char *kv)
{
	const char *eq = strchr(kv, '=');
	ssize_t i;
	char *copy;

	if (!eq)
		return -EINVAL;
	i = env_find(*env, kv, (size_t)(eq - kv));
	if (i < 0)
		return strv_push(env, kv);
	copy = strdup(kv);
	if (!copy)
		return -ENOMEM;
	free((*env)[i]);
	(*env)[i] = copy;
	return 0;
}

int launch_env_build(const struct launch_config *c, char *const *host, const char *home_root, char ***ret)
{
	_cleanup_strv_free_ char **env = NULL;
	static const struct {
		const char *name, *sub;
	} dirs[] = {
		{ "HOME", "home" },
		{ "TMPDIR", "tmp" },
		{ "XDG_CONFIG_HOME", "config" },
		{ "XDG_CACHE_HOME", "cache" },
		{ "XDG_STATE_HOME", "state" },
		{ "XDG_DATA_HOME", "data" },
	};
	int r;

	for (; host && *host; host++) {
		const char *kv = *host, *eq = strchr(kv, '=');
		_cleanup_free_ char *name = NULL;
		bool pass;

		if (!eq || eq == kv)
			continue;
		name = strndup(kv, (size_t)(eq - kv));
		if (!name)
			return -ENOMEM;
		if (c->env_allow_mode)
			pass = match_any(name, (const char *const *)c->env_allow);
		else
			pass = !launch_env_default_denied(name, eq + 1) &&
			       !match_any(name, (const char *const *)c->env_deny);
		if (home_root && match_any(name, redirected))
			pass = false;
		/* the transport of --setenv-from-env; what it carries is in c->setenv */
		if (strncmp(name, LAUNCH_SETENV_PREFIX, sizeof(LAUNCH_SETENV_PREFIX) - 1) == 0)
			pass = false;
		if (!pass)
			continue;
		r = env_put(&env, kv);
		if (r < 0)
			return r;
	}

	for (char **s = c->setenv; s && *s; s++) {
		r = env_put(&env, *s);
		if (r < 0)
			return r;
	}

	if (home_root)
		for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
			_cleanup_free_ char *kv = NULL;

			if (asprintf(&kv, "%s=%s/%s", dirs[i].name, home_root, dirs[i].sub) < 0)
				return -ENOMEM;
			r = env_put(&env, kv);
			if (r < 0)
				return r;
		}

	if (!env) {
		env = calloc(1, sizeof(char *));
		if (!env)
			return -ENOMEM;
	}
	*ret = TAKE_PTR(env);
	return 0;
}
