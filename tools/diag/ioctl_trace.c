/* Which driver calls make a process's NVIDIA ioctls (ff-readers-ioctl.sh).
 *
 *   gcc -O2 -shared -fPIC -o ioctl_trace.so ioctl_trace.c -ldl -lpthread
 *   IOCTL_TRACE_OUT=/tmp/t LD_PRELOAD=$PWD/ioctl_trace.so ffmpeg ...     # -> /tmp/t.PID
 *
 * An LD_PRELOAD shim over ioctl(2): every ioctl of NVIDIA's type ('F': /dev/nvidiactl,
 * /dev/nvidia0; IOCTL_TRACE_ALL=1: every ioctl) is counted and timed by request, calling
 * thread (main or other) and call stack; at exit the stacks that took the most time are
 * written with the nearest exported symbol of each frame (libcuda's cu* entry points,
 * libnvcuvid's cuvid*, the caller's own exported functions). The CUDA driver calls ioctl
 * through libc, so the shim sees its calls; nothing else changes. A diagnostic for machines
 * without perf, strace or nsys, never linked into anything. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define DEPTH 14
#define MAXREC 4096 /* distinct stacks: a decoder's start-up alone fills 256 */
struct rec { unsigned long req; int main; int n; void *pcs[DEPTH]; unsigned long count; double ms, max_ms; };
static struct rec recs[MAXREC];
static int nrecs, dropped;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int (*real_ioctl)(int, unsigned long, ...);
static __thread int inside;

static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap; va_start(ap, req); void *arg = va_arg(ap, void *); va_end(ap);
    if (!real_ioctl) real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    int want = ((req >> 8) & 0xff) == 'F' || getenv("IOCTL_TRACE_ALL");
    if (!want || inside) return real_ioctl(fd, req, arg);
    double t0 = now_ms();
    int r = real_ioctl(fd, req, arg);
    double dt = now_ms() - t0;
    inside = 1; /* backtrace() may itself load libgcc_s: never trace our own calls */
    void *pcs[DEPTH + 1];
    int n = backtrace(pcs, DEPTH + 1) - 1; /* drop this frame */
    if (n < 0) n = 0;
    int main = syscall(SYS_gettid) == getpid();
    pthread_mutex_lock(&mu);
    int i;
    for (i = 0; i < nrecs; i++)
        if (recs[i].req == req && recs[i].main == main && recs[i].n == n && !memcmp(recs[i].pcs, pcs + 1, n * sizeof(void *)))
            break;
    if (i == nrecs) {
        if (nrecs < MAXREC) { recs[i].req = req; recs[i].main = main; recs[i].n = n; memcpy(recs[i].pcs, pcs + 1, n * sizeof(void *)); nrecs++; }
        else { dropped++; i = -1; }
    }
    if (i >= 0) { recs[i].count++; recs[i].ms += dt; if (dt > recs[i].max_ms) recs[i].max_ms = dt; }
    pthread_mutex_unlock(&mu);
    inside = 0;
    return r;
}

/* Most time first. */
static int by_time(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

__attribute__((destructor)) static void dump(void)
{
    const char *base = getenv("IOCTL_TRACE_OUT");
    if (!base) return;
    char path[512]; snprintf(path, sizeof path, "%s.%d", base, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    pthread_mutex_lock(&mu);
    qsort(recs, nrecs, sizeof recs[0], by_time);
    fprintf(f, "%d stacks (%d dropped)\n", nrecs, dropped);
    for (int i = 0; i < nrecs && i < 25; i++) {
        fprintf(f, "req 0x%lx nr 0x%lx, %s thread: %lu calls, %.1f ms total, %.3f ms max\n", recs[i].req, recs[i].req & 0xff,
                recs[i].main ? "main" : "other",
                recs[i].count, recs[i].ms, recs[i].max_ms);
        for (int k = 0; k < recs[i].n; k++) {
            Dl_info info;
            if (dladdr(recs[i].pcs[k], &info) && info.dli_fname) {
                const char *lib = strrchr(info.dli_fname, '/');
                fprintf(f, "    %s!%s+0x%lx\n", lib ? lib + 1 : info.dli_fname, info.dli_sname ? info.dli_sname : "?",
                        (unsigned long)((char *)recs[i].pcs[k] - (char *)(info.dli_saddr ? info.dli_saddr : info.dli_fbase)));
            } else fprintf(f, "    %p\n", recs[i].pcs[k]);
        }
    }
    pthread_mutex_unlock(&mu);
    fclose(f);
}
