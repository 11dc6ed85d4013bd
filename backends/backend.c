/* backend.c: the backend registry and backend_select() (detection, override, the logged reason),
 * the one choice `loom train` and `loom info` both make. Adding a backend is adding a folder plus
 * one line in backend_registry(); nothing else changes. The door's op functions: backend_ops.c. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_blas.h"
#include "base/error.h"

extern const backend_entry cpu_backend_entry;
#ifdef LOOM_HAVE_CUDA
extern const backend_entry cuda_backend_entry; /* backends/cuda */
#endif
#ifdef LOOM_HAVE_METAL
extern const backend_entry metal_backend_entry;
#endif

const backend_entry *backend_registry(int *count)
{
    static backend_entry entries[3];
    int n = 0;
#ifdef LOOM_HAVE_CUDA
    entries[n++] = cuda_backend_entry;
#endif
#ifdef LOOM_HAVE_METAL
    entries[n++] = metal_backend_entry;
#endif
    entries[n++] = cpu_backend_entry;
    *count = n;
    return entries;
}

static const backend_entry *backend_find(const char *name)
{
    int n;
    const backend_entry *e = backend_registry(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0) return &e[i];
    return NULL;
}

static const char *backend_check_named(const char *name, const char *source, char *why, size_t why_len)
{
    const backend_entry *e = backend_find(name);
    if (!e) {
        int n;
        const backend_entry *all = backend_registry(&n);
        char names[128] = "";
        for (int i = 0; i < n; i++) {
            strncat(names, all[i].name, sizeof names - strlen(names) - 1);
            if (i + 1 < n) strncat(names, ", ", sizeof names - strlen(names) - 1);
        }
        loom_fail("unknown backend '%s' (from %s); this build has: %s", name, source, names);
        return NULL;
    }
    const char *reason = "";
    if (!e->available(&reason)) {
        loom_fail("backend '%s' (from %s) is not available here: %s", name, source, reason);
        return NULL;
    }
    if (why) snprintf(why, why_len, "forced by %s", source);
    return e->name;
}

/* Where the choice starts without a name: $LOOM_BACKEND as given (*from_env = 1), else the first
 * available backend in priority order (NULL when none is), the reasons of those skipped before
 * it appended to skipped ("name: reason; ..."). */
static const char *backend_start(int *from_env, char *skipped, size_t len)
{
    const char *env = getenv("LOOM_BACKEND");
    *from_env = env && env[0];
    if (*from_env) return env;
    int n;
    const backend_entry *e = backend_registry(&n);
    for (int i = 0; i < n; i++) {
        const char *reason = "";
        if (e[i].available(&reason)) return e[i].name;
        size_t used = strlen(skipped);
        snprintf(skipped + used, len - used, "%s%s: %s", used ? "; " : "", e[i].name, reason);
    }
    return NULL;
}

const char *backend_preferred(int *from_env)
{
    char skipped[256] = "";
    return backend_start(from_env, skipped, sizeof skipped);
}

const char *backend_choose(const char *name, char *why, size_t why_len)
{
    if (name && name[0]) return backend_check_named(name, "--backend", why, why_len);
    int from_env;
    char skipped[256] = "";
    const char *pick = backend_start(&from_env, skipped, sizeof skipped);
    if (from_env) return backend_check_named(pick, "LOOM_BACKEND", why, why_len);
    if (!pick) {
        loom_fail("no usable backend (%s)", skipped);
        return NULL;
    }
    if (why) snprintf(why, why_len, "auto-detected%s%s", skipped[0] ? "; " : "", skipped);
    return pick;
}

backend *backend_select(const char *name, const backend_config *cfg, char *why, size_t why_len)
{
    const char *pick = backend_choose(name, why, why_len);
    return pick ? backend_find(pick)->create(cfg) : NULL;
}

void backend_prepare_process(char **argv) { cpu_blas_ensure_fast_kernel(argv); }

const char *backend_blas_kernel(void) { return cpu_blas_corename(); }
