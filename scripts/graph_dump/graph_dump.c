/* graph_dump: an LD_PRELOAD shim that records the graphs llama.cpp reserves compute buffers for.
 *
 * It wraps two exported functions of libggml-base (called through the PLT, so a preloaded
 * definition wins) and appends one JSON line per call to the file named by $LLAMAFIT_GRAPH_DUMP:
 *
 *   ggml_backend_sched_reserve (ggml/src/ggml-backend.cpp): the graph llama_context::graph_reserve
 *     builds (src/llama-context.cpp), before the scheduler splits it, and, after the real call,
 *     every backend's compute buffer size in bytes (ggml_backend_sched_get_buffer_size).
 *     {"event": "sched", "seq": N, "n_copies": ..., "backends": [{"name", "size"}], "nodes": [...],
 *      "leafs": [...]}
 *   ggml_gallocr_reserve_n (ggml/src/ggml-alloc.c): the split graph the allocator places (split
 *     inputs and their copies included), each node's and leaf's buffer id, and after the real call
 *     the allocator's buffer sizes (ggml_gallocr_get_buffer_size: the running maximum).
 *     {"event": "galloc", "seq": N, "sizes": [bytes per buffer id], "nodes": [...], "leafs": [...]}
 *
 * "tensors" lists every tensor an event mentions, sources outside the node and leaf lists
 * (weights, views' sources) included; "leafs" and "nodes" are [index into tensors, buffer id]
 * pairs (the buffer id null in a sched event). A tensor is {"name", "op" (ggml_op_name),
 * "desc" (ggml_op_desc: unary and GLU ops by their own name), "type", "ne": [4], "nb": [4],
 * "nbytes", "flags", "src": [index|null], "view_src": index|null, "view_offs", "data": 0|1,
 * "buffer": name|null, "usage": the buffer's ggml_backend_buffer_usage (0 any, 1 weights, 2 compute;
 * present with a buffer), "backend": the backend a ggml_backend_sched_set_tensor_backend call
 * assigned it before the reserve (present only then; src/llama-context.cpp graph_get_cb and
 * src/llama-graph.cpp build_attn_mha pin some nodes)}.
 *
 * The struct layouts are those of ggml/include/ggml.h and ggml/src/ggml-impl.h (struct ggml_tensor,
 * struct ggml_cgraph) at llama.cpp b11434; they have been stable for many builds.
 * Build: cc -shared -fPIC -O2 -o graph_dump.so graph_dump.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGML_MAX_DIMS 4
#define GGML_MAX_SRC 10
#define GGML_MAX_OP_PARAMS 64
#define GGML_MAX_NAME 64

struct ggml_tensor {
    int type;
    void *buffer;
    int64_t ne[GGML_MAX_DIMS];
    size_t nb[GGML_MAX_DIMS];
    int op;
    int32_t op_params[GGML_MAX_OP_PARAMS / sizeof(int32_t)];
    int32_t flags;
    struct ggml_tensor *src[GGML_MAX_SRC];
    struct ggml_tensor *view_src;
    size_t view_offs;
    void *data;
    char name[GGML_MAX_NAME];
    void *extra;
    char padding[8];
};

struct ggml_cgraph {
    int size;
    int n_nodes;
    int n_leafs;
    struct ggml_tensor **nodes;
    struct ggml_tensor **grads;
    struct ggml_tensor **grad_accs;
    struct ggml_tensor **leafs;
};

extern const char *ggml_op_desc(const struct ggml_tensor *t);
extern const char *ggml_op_name(int op);
extern const char *ggml_type_name(int type);
extern size_t ggml_nbytes(const struct ggml_tensor *t);
extern const char *ggml_backend_buffer_name(void *buffer);
extern int ggml_backend_sched_get_n_backends(void *sched);
extern void *ggml_backend_sched_get_backend(void *sched, int i);
extern int ggml_backend_sched_get_n_copies(void *sched);
extern size_t ggml_backend_sched_get_buffer_size(void *sched, void *backend);
extern const char *ggml_backend_name(void *backend);
extern size_t ggml_gallocr_get_buffer_size(void *galloc, int buffer_id);
extern int ggml_backend_buffer_get_usage(void *buffer);

/* the scheduler's user assignments since its last reset: ggml_backend_sched_set_tensor_backend
 * writes them into its hash table, which ggml_backend_sched_reset clears */
static struct { const struct ggml_tensor *t; const char *backend; } *assigned = NULL;
static int n_assigned = 0, cap_assigned = 0;

static const char *assigned_backend(const struct ggml_tensor *t) {
    for (int i = n_assigned - 1; i >= 0; i--) {
        if (assigned[i].t == t) return assigned[i].backend;
    }
    return NULL;
}

void ggml_backend_sched_set_tensor_backend(void *sched, struct ggml_tensor *node, void *backend) {
    static void (*real)(void *, struct ggml_tensor *, void *) = NULL;
    if (real == NULL) real = (void (*)(void *, struct ggml_tensor *, void *))dlsym(RTLD_NEXT, "ggml_backend_sched_set_tensor_backend");
    real(sched, node, backend);
    if (n_assigned == cap_assigned) {
        cap_assigned = cap_assigned ? 2 * cap_assigned : 256;
        assigned = realloc(assigned, cap_assigned * sizeof(*assigned));
    }
    assigned[n_assigned].t = node;
    assigned[n_assigned].backend = ggml_backend_name(backend);
    n_assigned++;
}

void ggml_backend_sched_reset(void *sched) {
    static void (*real)(void *) = NULL;
    if (real == NULL) real = (void (*)(void *))dlsym(RTLD_NEXT, "ggml_backend_sched_reset");
    real(sched);
    n_assigned = 0;
}

static int seq = 0;

/* every tensor one event mentions, in first-seen order */
typedef struct {
    struct ggml_tensor **items;
    int n, cap;
} tlist;

static int tl_index(tlist *l, struct ggml_tensor *t) {
    for (int i = l->n - 1; i >= 0; i--) {
        if (l->items[i] == t) return i;
    }
    return -1;
}

static int tl_add(tlist *l, struct ggml_tensor *t) {
    int i = tl_index(l, t);
    if (i >= 0) return i;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->items = realloc(l->items, l->cap * sizeof(*l->items));
    }
    l->items[l->n] = t;
    return l->n++;
}

/* adds t and, depth first, its sources and view sources */
static void tl_walk(tlist *l, struct ggml_tensor *t) {
    if (t == NULL || tl_index(l, t) >= 0) return;
    /* ggml_cast's result is its own src[1] (ggml.c ggml_cast): the F32 KQ mask's cast to F16
     * before rule fa_mask_f16 */
    for (int j = 0; j < GGML_MAX_SRC; j++) {
        if (t->src[j] != t) tl_walk(l, t->src[j]);
    }
    tl_walk(l, t->view_src);
    tl_add(l, t);
}

static void put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c > 0x7e) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void put_tensors(FILE *f, tlist *l) {
    fputs("\"tensors\":[", f);
    for (int i = 0; i < l->n; i++) {
        struct ggml_tensor *t = l->items[i];
        if (i) fputc(',', f);
        fputs("{\"name\":", f);
        put_str(f, t->name);
        fputs(",\"op\":", f);
        put_str(f, ggml_op_name(t->op));
        fputs(",\"desc\":", f);
        put_str(f, ggml_op_desc(t));
        fputs(",\"type\":", f);
        put_str(f, ggml_type_name(t->type));
        fprintf(f, ",\"ne\":[%lld,%lld,%lld,%lld]", (long long)t->ne[0], (long long)t->ne[1],
                (long long)t->ne[2], (long long)t->ne[3]);
        fprintf(f, ",\"nb\":[%zu,%zu,%zu,%zu]", t->nb[0], t->nb[1], t->nb[2], t->nb[3]);
        fprintf(f, ",\"nbytes\":%zu,\"flags\":%d,\"src\":[", ggml_nbytes(t), t->flags);
        int last = -1;
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (t->src[j]) last = j;
        }
        for (int j = 0; j <= last; j++) {
            if (j) fputc(',', f);
            if (t->src[j]) fprintf(f, "%d", tl_index(l, t->src[j]));
            else fputs("null", f);
        }
        fputs("],\"view_src\":", f);
        if (t->view_src) fprintf(f, "%d", tl_index(l, t->view_src));
        else fputs("null", f);
        fprintf(f, ",\"view_offs\":%zu,\"data\":%d,\"buffer\":", t->view_offs, t->data != NULL);
        if (t->buffer) {
            put_str(f, ggml_backend_buffer_name(t->buffer));
            fprintf(f, ",\"usage\":%d", ggml_backend_buffer_get_usage(t->buffer));
        } else {
            fputs("null", f);
        }
        const char *backend = assigned_backend(t);
        if (backend) {
            fputs(",\"backend\":", f);
            put_str(f, backend);
        }
        fputc('}', f);
    }
    fputc(']', f);
}

static void put_ids(FILE *f, const char *key, tlist *l, struct ggml_tensor **ts, int n, const int *buf_ids) {
    fprintf(f, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        if (buf_ids) fprintf(f, "[%d,%d]", tl_index(l, ts[i]), buf_ids[i]);
        else fprintf(f, "[%d,null]", tl_index(l, ts[i]));
    }
    fputc(']', f);
}

/* one event's text is built in memory and appended at once: the scheduler's reserve calls the
 * allocator's inside it, and their lines must not interleave */
static FILE *open_dump(char **buf, size_t *len) {
    const char *path = getenv("LLAMAFIT_GRAPH_DUMP");
    if (path == NULL || *path == '\0') return NULL;
    return open_memstream(buf, len);
}

static void flush_dump(FILE *mem, char **buf, size_t *len) {
    fclose(mem); /* sets *buf and *len */
    FILE *f = fopen(getenv("LLAMAFIT_GRAPH_DUMP"), "a");
    if (f) {
        fwrite(*buf, 1, *len, f);
        fclose(f);
    }
    free(*buf);
}

static tlist collect(struct ggml_cgraph *g) {
    tlist l = {0};
    for (int i = 0; i < g->n_leafs; i++) tl_walk(&l, g->leafs[i]);
    for (int i = 0; i < g->n_nodes; i++) tl_walk(&l, g->nodes[i]);
    return l;
}

bool ggml_backend_sched_reserve(void *sched, struct ggml_cgraph *g) {
    static bool (*real)(void *, struct ggml_cgraph *) = NULL;
    if (real == NULL) real = (bool (*)(void *, struct ggml_cgraph *))dlsym(RTLD_NEXT, "ggml_backend_sched_reserve");
    tlist l = collect(g);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_dump(&buf, &len);
    int my_seq = seq++;
    if (f) {
        fprintf(f, "{\"event\":\"sched\",\"seq\":%d,", my_seq);
        put_tensors(f, &l);
        put_ids(f, "leafs", &l, g->leafs, g->n_leafs, NULL);
        put_ids(f, "nodes", &l, g->nodes, g->n_nodes, NULL);
    }
    bool ok = real(sched, g);
    if (f) {
        fprintf(f, ",\"ok\":%d,\"n_copies\":%d,\"backends\":[", ok, ggml_backend_sched_get_n_copies(sched));
        int n = ggml_backend_sched_get_n_backends(sched);
        for (int i = 0; i < n; i++) {
            void *b = ggml_backend_sched_get_backend(sched, i);
            if (i) fputc(',', f);
            fputs("{\"name\":", f);
            put_str(f, ggml_backend_name(b));
            fprintf(f, ",\"size\":%zu}", ggml_backend_sched_get_buffer_size(sched, b));
        }
        fputs("]}\n", f);
        flush_dump(f, &buf, &len);
    }
    n_assigned = 0; /* the real call resets the scheduler after a successful reserve */
    free(l.items);
    return ok;
}

bool ggml_gallocr_reserve_n(void *galloc, struct ggml_cgraph *g, const int *node_ids, const int *leaf_ids) {
    static bool (*real)(void *, struct ggml_cgraph *, const int *, const int *) = NULL;
    if (real == NULL) {
        real = (bool (*)(void *, struct ggml_cgraph *, const int *, const int *))dlsym(RTLD_NEXT, "ggml_gallocr_reserve_n");
    }
    tlist l = collect(g);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_dump(&buf, &len);
    int my_seq = seq++;
    if (f) {
        fprintf(f, "{\"event\":\"galloc\",\"seq\":%d,", my_seq);
        put_tensors(f, &l);
        put_ids(f, "leafs", &l, g->leafs, g->n_leafs, leaf_ids);
        put_ids(f, "nodes", &l, g->nodes, g->n_nodes, node_ids);
    }
    bool ok = real(galloc, g, node_ids, leaf_ids);
    if (f) {
        int max_id = 0;
        for (int i = 0; node_ids && i < g->n_nodes; i++) max_id = node_ids[i] > max_id ? node_ids[i] : max_id;
        for (int i = 0; leaf_ids && i < g->n_leafs; i++) max_id = leaf_ids[i] > max_id ? leaf_ids[i] : max_id;
        fprintf(f, ",\"ok\":%d,\"sizes\":[", ok);
        for (int i = 0; i <= max_id; i++) {
            if (i) fputc(',', f);
            fprintf(f, "%zu", ggml_gallocr_get_buffer_size(galloc, i));
        }
        fputs("]}\n", f);
        flush_dump(f, &buf, &len);
    }
    free(l.items);
    return ok;
}
