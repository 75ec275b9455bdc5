/* serve_faults.c: allocation failures on demand, for tests (FOGLINE_TEST_FAIL_ALLOC).
 *
 * Out-of-memory paths are the ones no ordinary test reaches, and the ones where a request can
 * be lost or a pointer left dangling. "<site>:<nth>[,<site>:<nth>...]" makes the nth
 * allocation (counted from 1 since startup) at a named site fail as if malloc had returned
 * NULL, once per entry; docs/robustness.md lists the sites. Compiled in always so the tested
 * binary is the shipped one; with the variable unset (always, outside tests) a site costs a
 * load and a branch. The counters are atomic: the event sites are on the engine thread. */
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static const char *const site_names[SRV_FAULT_SITES] = {
    [SRV_FAULT_DRAFT_EVENT] = "draft_event",
    [SRV_FAULT_COMMIT_EVENT] = "commit_event",
    [SRV_FAULT_DONE_EVENT] = "done_event",
    [SRV_FAULT_BRANCHES] = "branches",
    [SRV_FAULT_SSE] = "sse",
    [SRV_FAULT_WS_FRAME] = "ws_frame",
    [SRV_FAULT_TOKENIZE] = "tokenize",
};

int srv_faults_parse(srv_faults *f, const char *spec, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < SRV_FAULT_SITES; i++)
        atomic_init(&f->calls[i], 0);
    if (!spec || !*spec)
        return 0;
    const char *p = spec;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t nl = colon ? (size_t)(colon - p) : 0;
        int site = -1;
        for (int i = 0; colon && i < SRV_FAULT_SITES; i++)
            if (strlen(site_names[i]) == nl && !strncmp(p, site_names[i], nl))
                site = i;
        char *end = NULL;
        long nth = colon ? strtol(colon + 1, &end, 10) : 0;
        if (site < 0 || !end || end == colon + 1 || (*end && *end != ',') || nth < 1) {
            snprintf(err, errlen, "FOGLINE_TEST_FAIL_ALLOC: '%s' is not a list of <site>:<n> "
                     "(sites: draft_event, commit_event, done_event, branches, sse, ws_frame, "
                     "tokenize; n from 1)",
                     spec);
            return -1;
        }
        if (f->n == SRV_FAULTS_MAX) {
            snprintf(err, errlen, "FOGLINE_TEST_FAIL_ALLOC: at most %d entries", SRV_FAULTS_MAX);
            return -1;
        }
        f->site[f->n] = (srv_fault_site)site;
        f->nth[f->n] = nth;
        f->n++;
        p = *end ? end + 1 : end;
    }
    return 0;
}

bool srv_fault(srv_faults *f, srv_fault_site site)
{
    if (!f->n)
        return false;
    long k = atomic_fetch_add(&f->calls[site], 1) + 1;
    for (int i = 0; i < f->n; i++)
        if (f->site[i] == site && f->nth[i] == k)
            return true;
    return false;
}
