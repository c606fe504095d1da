/* LD_PRELOAD shim for benchmarks/probe/confined_cuda.py: every failed open/openat/access/ioctl/mmap/
   socket/connect of the process, with its errno, on stderr ("FAILED ..."). Build: cc -shared -fPIC -O1
   -o failed_calls.so failed_calls.c -ldl */
#define _GNU_SOURCE
#define _LARGEFILE64_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>
int __xstat64(int, const char *, struct stat64 *);
int __xstat(int, const char *, struct stat *);
int __lxstat64(int, const char *, struct stat64 *);

#define REAL(name) static __typeof__(name) *real_##name; if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)
#define LOG(...) do { int e = errno; fprintf(stderr, __VA_ARGS__); errno = e; } while (0)

static int open_common(const char *fn, int dirfd, const char *path, int flags, mode_t mode, int r) {
    if (r < 0) LOG("FAILED %s(%d, %s, 0x%x) = %s\n", fn, dirfd, path ? path : "?", flags, strerror(errno));
    return r;
}
int open(const char *p, int f, ...) { REAL(open); va_list a; va_start(a, f);
    mode_t m = (f & (O_CREAT | O_TMPFILE)) ? va_arg(a, int) : 0; va_end(a);
    return open_common("open", -100, p, f, m, real_open(p, f, m)); }
int open64(const char *p, int f, ...) { REAL(open64); va_list a; va_start(a, f);
    mode_t m = (f & (O_CREAT | O_TMPFILE)) ? va_arg(a, int) : 0; va_end(a);
    return open_common("open64", -100, p, f, m, real_open64(p, f, m)); }
int openat(int d, const char *p, int f, ...) { REAL(openat); va_list a;
    va_start(a, f); mode_t m = (f & (O_CREAT | O_TMPFILE)) ? va_arg(a, int) : 0; va_end(a);
    return open_common("openat", d, p, f, m, real_openat(d, p, f, m)); }
int openat64(int d, const char *p, int f, ...) { REAL(openat64); va_list a;
    va_start(a, f); mode_t m = (f & (O_CREAT | O_TMPFILE)) ? va_arg(a, int) : 0; va_end(a);
    return open_common("openat64", d, p, f, m, real_openat64(d, p, f, m)); }
int access(const char *p, int mode) { REAL(access); int r = real_access(p, mode);
    if (r < 0) LOG("FAILED access(%s, %d) = %s\n", p, mode, strerror(errno)); return r; }
int ioctl(int fd, unsigned long req, ...) { REAL(ioctl); va_list a;
    va_start(a, req); void *arg = va_arg(a, void *); va_end(a); int r = real_ioctl(fd, req, arg);
   
    if (r < 0) LOG("FAILED ioctl(%d, 0x%lx) = %s\n", fd, req, strerror(errno)); return r; }
void *mmap(void *ad, size_t len, int prot, int fl, int fd, off_t off) {
    REAL(mmap); void *r = real_mmap(ad, len, prot, fl, fd, off);
    if (r == MAP_FAILED) LOG("FAILED mmap(%p, %zu, %d, 0x%x, %d, %ld) = %s\n", ad, len, prot, fl, fd, (long)off,
                             strerror(errno));
    return r; }
int socket(int d, int t, int p) { REAL(socket); int r = real_socket(d, t, p);
    if (r < 0) LOG("FAILED socket(%d, %d, %d) = %s\n", d, t, p, strerror(errno)); return r; }
int connect(int fd, const struct sockaddr *sa, socklen_t n) { REAL(connect);
    int r = real_connect(fd, sa, n);
    if (r < 0) LOG("FAILED connect(%d, family %d, %s) = %s\n", fd, sa->sa_family,
                   sa->sa_family == AF_UNIX ? ((const struct sockaddr_un *)sa)->sun_path : "-", strerror(errno));
    return r; }
/* calls CUDA makes through paths the wrappers above do not see: stdio, directories, links, metadata */
FILE *fopen(const char *p, const char *m) { REAL(fopen); FILE *r = real_fopen(p, m);
    if (!r) LOG("FAILED fopen(%s, %s) = %s\n", p, m, strerror(errno)); return r; }
FILE *fopen64(const char *p, const char *m) { REAL(fopen64); FILE *r = real_fopen64(p, m);
    if (!r) LOG("FAILED fopen64(%s, %s) = %s\n", p, m, strerror(errno)); return r; }
DIR *opendir(const char *p) { REAL(opendir); DIR *r = real_opendir(p);
    if (!r) LOG("FAILED opendir(%s) = %s\n", p, strerror(errno)); return r; }
ssize_t readlink(const char *p, char *b, size_t n) { REAL(readlink); ssize_t r = real_readlink(p, b, n);
    if (r < 0) LOG("FAILED readlink(%s) = %s\n", p, strerror(errno)); return r; }
int stat(const char *p, struct stat *s) { REAL(stat); int r = real_stat(p, s);
    if (r < 0) LOG("FAILED stat(%s) = %s\n", p, strerror(errno)); return r; }
int stat64(const char *p, struct stat64 *s) { REAL(stat64); int r = real_stat64(p, s);
    if (r < 0) LOG("FAILED stat64(%s) = %s\n", p, strerror(errno)); return r; }
int lstat(const char *p, struct stat *s) { REAL(lstat); int r = real_lstat(p, s);
    if (r < 0) LOG("FAILED lstat(%s) = %s\n", p, strerror(errno)); return r; }
int __xstat64(int v, const char *p, struct stat64 *s) { REAL(__xstat64); int r = real___xstat64(v, p, s);
    if (r < 0) LOG("FAILED __xstat64(%s) = %s\n", p, strerror(errno)); return r; }
int __xstat(int v, const char *p, struct stat *s) { REAL(__xstat); int r = real___xstat(v, p, s);
    if (r < 0) LOG("FAILED __xstat(%s) = %s\n", p, strerror(errno)); return r; }
int __lxstat64(int v, const char *p, struct stat64 *s) { REAL(__lxstat64); int r = real___lxstat64(v, p, s);
    if (r < 0) LOG("FAILED __lxstat64(%s) = %s\n", p, strerror(errno)); return r; }
int mkdir(const char *p, mode_t m) { REAL(mkdir); int r = real_mkdir(p, m);
    if (r < 0) LOG("FAILED mkdir(%s) = %s\n", p, strerror(errno)); return r; }
