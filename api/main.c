// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * draftboxd: the HTTP/JSON server of draftbox sessions. Everything but
 * argument handling lives in libapi.
 */
#include "settings.h"
#include "log.h"
#include "server.h"

int main(int argc, char **argv)
{
	struct api_config cfg;
	int r;

	log_set_program("draftboxd");
	if (api_config_init(&cfg) < 0)
		return 1;
	r = api_config_parse_argv(&cfg, argc, argv);
	if (r != 0) {
		api_config_done(&cfg);
		return r > 0 ? 0 : 2;
	}
	log_set_structured(cfg.log_structured);
	r = api_config_finish(&cfg);
	if (r < 0) {
		log_error_errno(r, "invalid configuration");
		api_config_done(&cfg);
		return 2;
	}
	r = api_server_main(&cfg);
	api_config_done(&cfg);
	return r;
}
