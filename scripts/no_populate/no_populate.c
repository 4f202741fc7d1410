/* LD_PRELOAD shim for loading sparse real-shape models (scripts/make_shapes.py) in a real llama.cpp:
 * mmap without MAP_POPULATE and no POSIX_MADV_WILLNEED, so the file's holes are not read into the
 * page cache ahead of use (llama-mmap.cpp llama_mmap::impl prefetches the whole file otherwise).
 * What llama.cpp allocates (weights, KV, compute buffers) is unchanged; only the prefetch goes.
 *
 *     cc -shared -fPIC -O2 -o no_populate.so no_populate.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/types.h>

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);

static void *call_mmap(const char *name, void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    mmap_fn real = (mmap_fn) dlsym(RTLD_NEXT, name);
    if (fd >= 0) {
        flags &= ~MAP_POPULATE;
    }
    return real(addr, len, prot, flags, fd, off);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return call_mmap("mmap", addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return call_mmap("mmap64", addr, len, prot, flags, fd, off);
}

typedef int (*madvise_fn)(void *, size_t, int);

int posix_madvise(void *addr, size_t len, int advice) {
    if (advice == POSIX_MADV_WILLNEED) {
        return 0;
    }
    madvise_fn real = (madvise_fn) dlsym(RTLD_NEXT, "posix_madvise");
    return real(addr, len, advice);
}
