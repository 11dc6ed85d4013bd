/* config.c: reading a job configuration (see config.h): JSON files, model presets and
 * `--set a.b=v` overrides into job_config, type/range checks from the field table, cross-field
 * validation. Must never exit or print: each error is one loom_fail() line naming source+field. */
#include "core/config/config.h"
#include "core/config/config_table.h"
#include "base/error.h"
#include "base/log.h"
#include "core/config/presets.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PRESETS 64

/* loom_fail with "src: " in front when src is given. */
static int fail_at(const char *src, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_at(const char *src, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return src ? loom_fail("%s: %s", src, msg) : loom_fail("%s", msg);
}

/* Re-raise the current message with "src: " in front (copied first: loom_error() is the
 * buffer loom_fail writes). */
static int fail_prefixed(const char *src)
{
    char msg[900];
    snprintf(msg, sizeof msg, "%s", loom_error());
    return loom_fail("%s: %s", src, msg);
}

/* A JSON value as it appears in a message: compact, one line, cut at 40 characters. */
static void describe(const cJSON *v, char *buf, size_t n)
{
    char *text = cJSON_PrintUnformatted(v);
    if (!text) { snprintf(buf, n, "(unprintable)"); return; }
    if (strlen(text) > 40) snprintf(buf, n, "%.37s...", text);
    else snprintf(buf, n, "%s", text);
    cJSON_free(text);
}

static const char *kind_name(const cJSON *v)
{
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a bool";
    return "null";
}

/* ---- one field ---- */

static int rule_check_number(int i, double x, const char *src)
{
    const config_rule *r = config_rule_of(i);
    if (x < r->lo || (r->lo_open && x == r->lo) || x > r->hi || (r->hi_open && x == r->hi)) {
        char rule[160];
        config_rule_text(i, rule, sizeof rule);
        return fail_at(src, "field '%s' must be %s, got %.9g", config_fields(NULL)[i].path, rule,
                       x);
    }
    return 0;
}

static int rule_check_string(int i, const char *s, const char *src)
{
    const config_rule *r = config_rule_of(i);
    if (!r->choices) return 0;
    size_t len = strlen(s);
    for (const char *c = r->choices; *c;) {
        size_t w = strcspn(c, "|");
        if (w == len && strncmp(c, s, w) == 0) return 0;
        c += w + (c[w] == '|');
    }
    char rule[160];
    config_rule_text(i, rule, sizeof rule);
    return fail_at(src, "field '%s' must be %s, got \"%s\"", config_fields(NULL)[i].path, rule, s);
}

/* A seed: a JSON integer up to 2^53 (doubles are exact there) or a string of digits. */
static int parse_u64(const cJSON *v, uint64_t *out)
{
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (!(x >= 0 && x <= 9007199254740992.0 && x == floor(x))) return -1;
        *out = (uint64_t)x;
        return 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring[0]) return -1;
    const char *s = v->valuestring;
    if (strspn(s, "0123456789") != strlen(s)) return -1;
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno == ERANGE) return -1;
    *out = (uint64_t)x;
    return 0;
}

static int fail_type(const char *src, const char *path, const char *want, const cJSON *v)
{
    char got[64];
    describe(v, got, sizeof got);
    return fail_at(src, "field '%s' must be %s, got %s", path, want, got);
}

/* Store a cJSON value into field i, checking its type and rule. src prefixes the one-line error
 * ("job.json", "--set train.lr"); NULL = no prefix. -1 on error, cfg unchanged. */
static int config_field_set(job_config *cfg, int i, const cJSON *v, const char *src)
{
    const config_field *f = &config_fields(NULL)[i];
    void *p = (char *)cfg + f->offset;
    if (i < CONFIG_MAX_FIELDS) cfg->named[i] = 1; /* a preset's fields land in a copy (config_apply_preset) */
    switch (f->type) {
    case CFG_INT: {
        double x = v->valuedouble;
        if (!cJSON_IsNumber(v) || x != floor(x) || x < INT_MIN || x > INT_MAX)
            return fail_type(src, f->path, "an integer", v);
        if (rule_check_number(i, x, src)) return -1;
        *(int *)p = (int)x;
        return 0;
    }
    case CFG_FLOAT: {
        double x = v->valuedouble;
        if (!cJSON_IsNumber(v) || !isfinite(x) || fabs(x) > FLT_MAX)
            return fail_type(src, f->path, "a number", v);
        if (rule_check_number(i, x, src)) return -1;
        *(float *)p = (float)x;
        return 0;
    }
    case CFG_BOOL:
        if (!cJSON_IsBool(v))
            return fail_type(src, f->path, "true or false", v);
        *(int *)p = cJSON_IsTrue(v);
        return 0;
    case CFG_STRING:
        if (!cJSON_IsString(v))
            return fail_type(src, f->path, "a string", v);
        if (strlen(v->valuestring) >= f->size)
            return fail_at(src, "field '%s' is too long (%zu bytes, at most %zu)", f->path,
                           strlen(v->valuestring), f->size - 1);
        if (rule_check_string(i, v->valuestring, src)) return -1;
        memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
        return 0;
    case CFG_U64: {
        uint64_t x;
        if (parse_u64(v, &x))
            return fail_type(src, f->path,
                             "a non-negative integer (a string of digits above 2^53)", v);
        *(uint64_t *)p = x;
        return 0;
    }
    }
    return fail_at(src, "field '%s' has an unknown type", f->path);
}

void config_defaults(job_config *cfg)
{
    int n;
    const config_field *fields = config_fields(&n);
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < n; i++) {
        cJSON *v = cJSON_Parse(fields[i].default_value);
        /* Cannot fail for a well-formed table; test_config applies every default strictly. */
        if (v) config_field_set(cfg, i, v, NULL);
        cJSON_Delete(v);
    }
    memset(cfg->named, 0, sizeof cfg->named); /* a default is not the job's */
}

/* ---- unknown fields: suggest the nearest known name ---- */

/* Levenshtein distance (insert, delete, substitute all cost 1); names are short. */
static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 127 || lb > 127) return 1000;
    int row[128];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *leaf(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* Distance from what was written to a candidate: the whole path, or the last part plus one
 * (so "lr" at the top level and "model.lr" both find "train.lr"). */
static int name_distance(const char *name, const char *cand)
{
    int d = edit_distance(name, cand), d2 = edit_distance(leaf(name), leaf(cand)) + 1;
    return d2 < d ? d2 : d;
}

/* Other trainers' names (Hugging Face's TrainingArguments, PEFT's LoraConfig) for loom's fields,
 * which no edit distance finds. */
static const char *const synonyms[][2] = {
    {"learning_rate", "train.lr"},          {"max_steps", "train.steps"},
    {"num_steps", "train.steps"},           {"warmup_steps", "train.warmup"},
    {"warmup_ratio", "train.warmup"},       {"max_grad_norm", "train.grad_clip"},
    {"gradient_clip", "train.grad_clip"},   {"per_device_train_batch_size", "train.micro_batch"},
    {"num_train_epochs", "finetune.epochs"}, {"lora_r", "finetune.lora_rank"},
};

/* loom's field for another trainer's name, or NULL. */
static const char *synonym(const char *name)
{
    for (size_t k = 0; k < sizeof synonyms / sizeof synonyms[0]; k++)
        if (strcmp(name, synonyms[k][0]) == 0) return synonyms[k][1];
    return NULL;
}

static const char *suggest(const char *name)
{
    if (synonym(leaf(name))) return synonym(leaf(name));
    int n, best_d = 1000;
    const config_field *f = config_fields(&n);
    const char *best = NULL;
    for (int s = 1; config_section_name(s); s++) {
        int d = edit_distance(name, config_section_name(s));
        if (d < best_d) { best_d = d; best = config_section_name(s); }
    }
    for (int i = 0; i < n; i++) {
        int d = name_distance(name, f[i].path);
        if (d < best_d) { best_d = d; best = f[i].path; }
    }
    int len = (int)strlen(name);
    return best && (best_d <= 2 || 3 * best_d <= len) ? best : NULL;
}

const char *config_suggest(const char *name, int exact)
{
    if (!exact) return suggest(name);
    if (synonym(name)) return synonym(name);
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(leaf(f[i].path), name) == 0) return f[i].path;
    return NULL;
}

static int fail_unknown(const char *src, const char *name)
{
    const char *near = suggest(name);
    if (near) return fail_at(src, "unknown field '%s' (did you mean '%s'?)", name, near);
    return fail_at(src, "unknown field '%s'", name);
}

/* ---- presets ---- */

const char *const *config_preset_names(void)
{
    static const char *names[MAX_PRESETS + 1];
    int n = 0;
    for (const preset_file *p = loom_presets; p->name && n < MAX_PRESETS; p++) names[n++] = p->name;
    names[n] = NULL;
    return names;
}

static int fail_unknown_preset(const char *name)
{
    char known[600] = "";
    size_t len = 0;
    for (const char *const *p = config_preset_names(); *p && len + 2 < sizeof known; p++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", *p);
    return loom_fail("unknown model preset '%s' (known: %s)", name, known);
}

/* Apply the model fields of a JSON object (keys without "model.") to cfg. */
static int model_fields_apply(job_config *cfg, const cJSON *obj, const char *src, int skip_preset)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[160];
        snprintf(path, sizeof path, "model.%s", it->string);
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (strcmp(prev->string, it->string) == 0)
                return fail_at(src, "field '%s' appears twice", path);
        if (skip_preset && strcmp(it->string, "preset") == 0) continue;
        int i = config_field_find(path);
        if (i < 0) return fail_unknown(src, path);
        if (config_field_set(cfg, i, it, src)) return -1;
    }
    return 0;
}

int config_apply_preset(model_config *m, const char *preset)
{
    const preset_file *p = loom_presets;
    while (p->name && strcmp(p->name, preset) != 0) p++;
    if (!p->name) return fail_unknown_preset(preset);
    char src[128];
    snprintf(src, sizeof src, "configs/models/%s.json", p->name);
    cJSON *root = cJSON_Parse(p->json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail_at(src, "not a JSON object");
    }
    /* Start from the defaults so a preset means the same thing whatever came before. */
    job_config tmp;
    config_defaults(&tmp);
    int rc = model_fields_apply(&tmp, root, src, 0);
    cJSON_Delete(root);
    if (rc) return -1;
    snprintf(tmp.model.preset, sizeof tmp.model.preset, "%s", p->name);
    *m = tmp.model;
    return 0;
}

/* ---- job files ---- */

/* Parse text, or fail with "src: line N: invalid JSON near '...'". cJSON's error pointer can
 * sit just past the offending character (e.g. after "10,}"), so whitespace under it is stepped
 * back over, and the snippet shows some text on both sides. */
static cJSON *json_parse(const char *text, const char *src)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (root) return root;
    if (!end || end < text) end = text;
    if (!*end && end == text) {
        fail_at(src, "line 1: invalid JSON: the text is empty");
        return NULL;
    }
    int at_end = !*end;
    while (end > text && (!*end || strchr(" \t\r\n", *end))) end--;
    /* a trailing comma: name its line, not the bracket's (under the pointer or just before it) */
    const char *b = *end != '}' && *end != ']' && end > text ? end - 1 : end;
    char closer = 0;
    if (*b == '}' || *b == ']') {
        const char *c = b;
        while (c > text && strchr(" \t\r\n", c[-1])) c--;
        if (c > text && c[-1] == ',') closer = *b, end = c - 1;
    }
    int line = 1;
    const char *line_start = text;
    for (const char *p = text; p < end; p++)
        if (*p == '\n') { line++; line_start = p + 1; }
    const char *from = end - line_start > 16 ? end - 16 : line_start;
    size_t w = strcspn(from, "\r\n");
    if (w > (size_t)(end - from) + 16) w = (size_t)(end - from) + 16;
    if (closer)
        fail_at(src, "line %d: invalid JSON: a trailing comma before '%c' (JSON allows none), near '%.*s'", line,
                closer, (int)w, from);
    else if (at_end) fail_at(src, "line %d: invalid JSON: unexpected end of input", line);
    else fail_at(src, "line %d: invalid JSON near '%.*s'", line, (int)w, from);
    return NULL;
}

/* The preset the file names, if any, stored in cfg->model.preset (not applied yet). */
static int file_preset(job_config *cfg, const cJSON *root, const char *src)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model) return 0;
    const cJSON *name = model;
    if (cJSON_IsObject(model)) name = cJSON_GetObjectItemCaseSensitive(model, "preset");
    else if (!cJSON_IsString(model))
        return fail_type(src, "model", "a preset name or an object", model);
    return name ? config_field_set(cfg, config_field_find("model.preset"), name, src) : 0;
}

/* Apply every field of the file except the preset (applied before). */
static int file_apply(job_config *cfg, const cJSON *root, const char *src)
{
    for (const cJSON *it = root->child; it; it = it->next) {
        for (const cJSON *prev = root->child; prev != it; prev = prev->next)
            if (strcmp(prev->string, it->string) == 0)
                return fail_at(src, "field '%s' appears twice", it->string);
        if (strcmp(it->string, "model") == 0 && cJSON_IsString(it)) continue;
        if (config_is_section(it->string)) {
            if (!cJSON_IsObject(it)) return fail_type(src, it->string, "an object", it);
            if (strcmp(it->string, "model") == 0) {
                if (model_fields_apply(cfg, it, src, 1)) return -1;
                continue;
            }
            for (const cJSON *c = it->child; c; c = c->next) {
                char path[160];
                snprintf(path, sizeof path, "%s.%s", it->string, c->string);
                for (const cJSON *prev = it->child; prev != c; prev = prev->next)
                    if (strcmp(prev->string, c->string) == 0)
                        return fail_at(src, "field '%s' appears twice", path);
                int i = config_field_find(path);
                if (i < 0) return fail_unknown(src, path);
                if (config_field_set(cfg, i, c, src)) return -1;
            }
            continue;
        }
        int i = strchr(it->string, '.') ? -1 : config_field_find(it->string);
        if (i < 0) return fail_unknown(src, it->string);
        if (config_field_set(cfg, i, it, src)) return -1;
    }
    return 0;
}

/* ---- --set a.b=v ---- */

/* Split "a.b=v"; "model" is short for "model.preset". Fills key and src ("--set a.b"). */
static int override_split(const char *a, char *key, size_t nkey, const char **val, char *src,
                          size_t nsrc)
{
    const char *eq = strchr(a, '=');
    if (!eq || eq == a)
        return loom_fail("--set: expected a.b=value, got '%.200s'", a);
    size_t kl = (size_t)(eq - a);
    if (kl >= nkey) return loom_fail("--set: field name too long: '%.100s...'", a);
    memcpy(key, a, kl);
    key[kl] = '\0';
    if (strcmp(key, "model") == 0) snprintf(key, nkey, "model.preset");
    snprintf(src, nsrc, "--set %s", key);
    *val = eq + 1;
    return 0;
}

static int is_preset_override(const char *a)
{
    return strncmp(a, "model=", 6) == 0 || strncmp(a, "model.preset=", 13) == 0;
}

/* Store one override; apply_preset: also load the preset's fields when it names one. */
static int override_apply(job_config *cfg, const char *a, int apply_preset)
{
    char key[128], src[160];
    const char *val = NULL;
    if (override_split(a, key, sizeof key, &val, src, sizeof src)) return -1;
    int i = config_field_find(key);
    if (i < 0) return fail_unknown("--set", key);
    /* JSON when it parses; a string field takes anything else as the bare text. */
    cJSON *v = cJSON_ParseWithOpts(val, NULL, 1);
    if (!v || (config_fields(NULL)[i].type == CFG_STRING && !cJSON_IsString(v))) {
        cJSON_Delete(v);
        v = cJSON_CreateString(val);
    }
    if (!v) return fail_at(src, "out of memory");
    int rc = config_field_set(cfg, i, v, src);
    cJSON_Delete(v);
    if (rc || !apply_preset || strcmp(key, "model.preset") != 0 || !cfg->model.preset[0])
        return rc;
    return config_apply_preset(&cfg->model, cfg->model.preset) ? fail_prefixed(src) : 0;
}

int config_set(job_config *cfg, const char *assignment)
{
    return override_apply(cfg, assignment, 1);
}

/* field f holds the same value in a and b */
static int field_same(const config_field *f, const void *a, const void *b)
{
    const char *pa = (const char *)a + f->offset, *pb = (const char *)b + f->offset;
    switch (f->type) {
    case CFG_FLOAT: return *(const float *)pa == *(const float *)pb;
    case CFG_STRING: return strncmp(pa, pb, f->size) == 0;
    case CFG_U64: return *(const uint64_t *)pa == *(const uint64_t *)pb;
    default: return *(const int *)pa == *(const int *)pb;
    }
}

/* --set model=PRESET on a job file whose "model" object fixes fields: one warning naming the
 * fields whose file value won over the preset's (after: the config once the file applied). */
static void warn_model_won(const job_config *preset, const job_config *after, const cJSON *root, const char *src)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    char won[512] = "";
    size_t len = 0;
    for (const cJSON *it = cJSON_IsObject(model) ? model->child : NULL; it; it = it->next) {
        char path[160];
        snprintf(path, sizeof path, "model.%s", it->string);
        int i = strcmp(it->string, "preset") ? config_field_find(path) : -1;
        if (i < 0 || field_same(&config_fields(NULL)[i], preset, after) || len + 2 >= sizeof won) continue;
        len += (size_t)snprintf(won + len, sizeof won - len, "%s%s", len ? ", " : "", path);
    }
    if (len)
        log_warn("--set model.preset=%s: the job file's fields win over the preset's: %s (%s; the file's fields "
                 "apply after the preset, docs/config.md)", after->model.preset, won, src);
}

/* defaults -> preset (file's, then --set's) -> the file's fields -> the other overrides. */
static int load_tree(job_config *cfg, const cJSON *root, const char *src,
                     const char *const *overrides, int n)
{
    const char *preset_src = src;
    if (root && file_preset(cfg, root, src)) return -1;
    char file_preset_name[sizeof cfg->model.preset];
    memcpy(file_preset_name, cfg->model.preset, sizeof file_preset_name);
    for (int k = 0; k < n; k++) {
        if (!is_preset_override(overrides[k])) continue;
        if (override_apply(cfg, overrides[k], 0)) return -1;
        preset_src = "--set model.preset";
    }
    if (cfg->model.preset[0] && config_apply_preset(&cfg->model, cfg->model.preset))
        return fail_prefixed(preset_src);
    job_config preset = *cfg;
    if (root && file_apply(cfg, root, src)) return -1;
    if (root && preset_src != src && strcmp(file_preset_name, preset.model.preset) != 0)
        warn_model_won(&preset, cfg, root, src);
    for (int k = 0; k < n; k++)
        if (!is_preset_override(overrides[k]) && override_apply(cfg, overrides[k], 0)) return -1;
    return 0;
}

int config_load_string(job_config *out, const char *json, const char *source,
                       const char *const *overrides, int noverrides)
{
    const char *src = source ? source : "config";
    job_config cfg;
    config_defaults(&cfg);
    cJSON *root = NULL;
    if (json) {
        root = json_parse(json, src);
        if (!root) return -1;
        if (!cJSON_IsObject(root)) {
            int rc = fail_at(src, "the top level must be a JSON object, got %s", kind_name(root));
            cJSON_Delete(root);
            return rc;
        }
    }
    int rc = load_tree(&cfg, root, src, overrides, noverrides);
    cJSON_Delete(root);
    if (rc) return -1;
    if (config_validate(&cfg)) return fail_prefixed(src);
    *out = cfg;
    return 0;
}

/* Whole file into a malloc'd string, or NULL with the reason recorded. */
static char *file_read(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        loom_fail("%s: is a directory, not a job file (give its JSON file, e.g. configs/demo.json)", path);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        loom_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (size_t got; buf; len += got) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        loom_fail("%s: cannot read: %s", path, buf ? "I/O error" : "out of memory");
        return NULL;
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        loom_fail("%s: not a text file (contains a NUL byte)", path);
        return NULL;
    }
    return buf;
}

int config_load(job_config *cfg, const char *path, const char *const *overrides, int noverrides)
{
    if (!path) return config_load_string(cfg, NULL, "--set", overrides, noverrides);
    char *text = file_read(path);
    if (!text) return -1;
    int rc = config_load_string(cfg, text, path, overrides, noverrides);
    free(text);
    return rc;
}

/* ---- cross-field validation ---- */

/* Each field alone: its rule, finite floats, terminated strings (configs built in code). */
static int validate_fields(const job_config *cfg)
{
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; i < n; i++) {
        const char *p = (const char *)cfg + f[i].offset;
        switch (f[i].type) {
        case CFG_INT:
            if (rule_check_number(i, *(const int *)p, NULL)) return -1;
            break;
        case CFG_FLOAT:
            if (!isfinite(*(const float *)p))
                return loom_fail("field '%s' must be a finite number", f[i].path);
            if (rule_check_number(i, *(const float *)p, NULL)) return -1;
            break;
        case CFG_STRING:
            if (!memchr(p, '\0', f[i].size))
                return loom_fail("field '%s' is not a terminated string", f[i].path);
            if (rule_check_string(i, p, NULL)) return -1;
            break;
        case CFG_BOOL:
            if (*(const int *)p != 0 && *(const int *)p != 1)
                return loom_fail("field '%s' must be 0 or 1, got %d", f[i].path, *(const int *)p);
            break;
        case CFG_U64: break;
        }
    }
    return 0;
}

/* finetune.lora_targets: a comma list of known projection names, each once. */
static int validate_lora_targets(const char *list)
{
    static const char *const known[] = {"q", "k", "v", "o", "fc", "proj", "gate", "up", "down",
                                        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                        "up_proj", "down_proj", "c_attn", "c_fc", "c_proj", "all-linear"};
    const int nknown = (int)(sizeof known / sizeof known[0]);
    int seen[32] = {0}, count = 0;
    for (const char *s = list; *s;) {
        size_t w = strcspn(s, ",");
        int k = 0;
        while (k < nknown && !(strlen(known[k]) == w && strncmp(known[k], s, w) == 0)) k++;
        if (k == nknown)
            return loom_fail("finetune.lora_targets: unknown projection '%.*s' (known: q, k, v, "
                             "o, fc, proj, gate, up, down, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                             "down_proj, c_attn, c_fc, c_proj, all-linear)", (int)w, s);
        if (seen[k]++) return loom_fail("finetune.lora_targets: '%s' is listed twice", known[k]);
        count++;
        s += w + (s[w] == ',');
    }
    return count ? 0 : loom_fail("finetune.lora_targets: empty (name at least one projection)");
}

static int validate_model(const model_config *m)
{
    if (!m->head_dim && m->d_model % m->n_head)
        return loom_fail("model.d_model (%d) must be divisible by model.n_head (%d)", m->d_model,
                         m->n_head);
    if (m->n_head % m->n_kv_head)
        return loom_fail("model.n_head (%d) must be divisible by model.n_kv_head (%d)", m->n_head,
                         m->n_kv_head);
    if (strcmp(m->positions, "rope") == 0 && config_head_dim(m) % 2)
        return loom_fail("model.positions = rope needs an even head dim, but it is %d "
                         "(model.head_dim, or model.d_model / model.n_head = %d / %d)",
                         config_head_dim(m), m->d_model, m->n_head);
    return 0;
}

static int validate_train(const train_config *t, const model_config *m)
{
    if (t->seq_len > m->max_seq)
        return loom_fail("train.seq_len (%d) must be <= model.max_seq (%d)", t->seq_len,
                         m->max_seq);
    if (t->micro_batch > 0 && t->batch_size % t->micro_batch)
        return loom_fail("train.micro_batch (%d) must divide train.batch_size (%d)",
                         t->micro_batch, t->batch_size);
    if (t->min_lr > t->lr)
        return loom_fail("train.min_lr (%g) must be <= train.lr (%g)", t->min_lr, t->lr);
    if (t->warmup >= 1 && t->warmup != floorf(t->warmup))
        return loom_fail("train.warmup (%g) must be a fraction below 1 or a whole number of "
                         "steps", t->warmup);
    if (t->warmup > t->steps)
        return loom_fail("train.warmup (%g steps) must be <= train.steps (%d)", t->warmup,
                         t->steps);
    return 0;
}

/* The offset of the first byte of s that is not well-formed UTF-8 (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF) or is a control character, or -1 when there is none. */
static long utf8_bad_at(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    for (long i = 0; s[i];) {
        unsigned c = s[i];
        int n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
        if (n < 0 || (n == 0 && (c < 0x20 || c == 0x7F))) return i;
        for (int k = 1; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return i;
        i += n + 1;
    }
    return -1;
}

int config_validate(const job_config *cfg)
{
    if (validate_fields(cfg)) return -1;
    if (!cfg->name[0] || strchr(cfg->name, '/') || !strcmp(cfg->name, ".") || !strcmp(cfg->name, ".."))
        return loom_fail("field 'name' must be a non-empty name without '/' (and not . or ..), got \"%s\"",
                         cfg->name);
    long bad = utf8_bad_at(cfg->name);
    if (bad >= 0)
        return loom_fail("field 'name' must be UTF-8 text without control characters (it names the run folder): "
                         "byte %ld is 0x%02x", bad, (unsigned char)cfg->name[bad]);
    if (validate_model(&cfg->model) || validate_train(&cfg->train, &cfg->model)) return -1;
    /* which bases are Needle's (a .safetensors file, or a loom checkpoint imported from one) the
     * runs tell when they open them: here only a job with no base at all is sure to have none */
    if (cfg->model.layers && !cfg->finetune.base[0])
        return loom_fail("model.layers (%d): a ladder rung of a Needle base (finetune.base NAME.safetensors or "
                         "its `loom import`); other models take their depth from the base or model.n_layer",
                         cfg->model.layers);
    if (strcmp(cfg->parallel.comm, "nccl") == 0 && cfg->backend[0] &&
        strcmp(cfg->backend, "cuda") != 0)
        return loom_fail("parallel.comm = nccl needs backend cuda, got backend \"%s\"",
                         cfg->backend);
    return validate_lora_targets(cfg->finetune.lora_targets);
}

/* ---- model config in checkpoints ---- */

int config_model_from_json(model_config *m, const char *json)
{
    const char *src = "model config";
    cJSON *root = json ? json_parse(json, src) : NULL;
    if (!root) return json ? -1 : loom_fail("%s: missing", src);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_fail("%s: must be a JSON object", src);
    }
    /* Fields the text lacks (older checkpoints) keep their defaults; the preset is a label. */
    job_config tmp;
    config_defaults(&tmp);
    tmp.model.preset[0] = '\0';
    int rc = model_fields_apply(&tmp, root, src, 0);
    cJSON_Delete(root);
    if (rc) return -1;
    if (validate_model(&tmp.model)) return fail_prefixed(src);
    *m = tmp.model;
    return 0;
}

const char *config_model_diff(const model_config *a, const model_config *b)
{
    job_config ja, jb;
    memset(&ja, 0, sizeof ja);
    memset(&jb, 0, sizeof jb);
    ja.model = *a;
    jb.model = *b;
    int n;
    const config_field *f = config_fields(&n);
    for (int i = 0; i < n; i++) {
        /* The preset is only the name the fields started from; the fields decide. */
        if (strncmp(f[i].path, "model.", 6) != 0 || strcmp(f[i].path, "model.preset") == 0)
            continue;
        if (!field_same(&f[i], &ja, &jb)) return f[i].path;
    }
    return NULL;
}
