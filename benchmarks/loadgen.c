/*
 * Closed-loop TCP load generator for corun's benchmarks (echo and HTTP/1.1).
 *
 * One thread, one epoll set, N connections, one request in flight per
 * connection: send the request, read the whole response, record the latency,
 * send the next request.  After the warmup, completions are counted and their
 * latencies recorded for the measured duration.  Prints one JSON line.
 *
 * It exists because a Python client pays interpreter overhead per request of
 * the same order as the server under test, and on a 2-core machine the client
 * then becomes the bottleneck.  The Python version (loadgen.py) has the same
 * command line and output and is used when no C compiler is available.
 *
 *   loadgen --mode echo|http --port P [--host 127.0.0.1] [--conns 10]
 *           [--size 1024] [--warmup 0.5] [--duration 3] [--path /]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTP_BUF 65536

typedef struct {
    int fd;
    int alive;
    int want_out;     /* EPOLLOUT registered: the request is partly sent */
    size_t sent;      /* bytes of the current request sent */
    size_t received;  /* bytes of the current response received (echo) */
    size_t hlen;      /* bytes buffered in hbuf (http) */
    size_t expect;    /* http: full response length once the headers are parsed */
    double t_start;
    char *hbuf;
} conn_t;

static int mode_http = 0;
static const char *req = NULL;
static size_t req_len = 0;
static size_t msg_size = 1024;
static int epfd = -1;

static double *lat = NULL;
static size_t lat_n = 0, lat_cap = 0;
static long long completed = 0;
static long long errors = 0;
static int measuring = 0;
static int finished = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void record(double latency) {
    completed++;
    if (lat_n == lat_cap) {
        lat_cap = lat_cap ? lat_cap * 2 : 65536;
        lat = realloc(lat, lat_cap * sizeof(double));
        if (!lat) {
            perror("realloc");
            exit(3);
        }
    }
    lat[lat_n++] = latency;
}

static void set_out(conn_t *c, int on) {
    if (c->want_out == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

static void drop(conn_t *c) {
    if (!c->alive) return;
    errors++;
    c->alive = 0;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
}

static void try_send(conn_t *c) {
    while (c->sent < req_len) {
        ssize_t n = send(c->fd, req + c->sent, req_len - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_out(c, 1);
                return;
            }
            if (errno == EINTR) continue;
            drop(c);
            return;
        }
        c->sent += (size_t)n;
    }
    set_out(c, 0);
}

static void start_request(conn_t *c, double t) {
    c->sent = 0;
    c->received = 0;
    c->hlen = 0;
    c->expect = 0;
    c->t_start = t;
    try_send(c);
}

static void complete(conn_t *c) {
    double t = now();
    if (measuring) record(t - c->t_start);
    if (!finished) start_request(c, t);
}

/* http: parse the buffered headers; returns the full response length or 0. */
static size_t http_expect(conn_t *c) {
    char *end = memmem(c->hbuf, c->hlen, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t header_len = (size_t)(end - c->hbuf) + 4;
    size_t body = 0;
    char *p = c->hbuf;
    while (p < end) {
        char *eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
        if (!eol) break;
        if ((size_t)(eol - p) > 15 && strncasecmp(p, "content-length:", 15) == 0) {
            body = (size_t)strtoull(p + 15, NULL, 10);
        }
        p = eol + 2;
    }
    return header_len + body;
}

static void on_readable(conn_t *c, char *scratch, size_t scratch_len) {
    if (!mode_http) {
        ssize_t n = recv(c->fd, scratch, scratch_len, 0);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            drop(c);
            return;
        }
        c->received += (size_t)n;
        if (c->received >= msg_size) complete(c);
        return;
    }
    if (c->hlen == HTTP_BUF) {
        drop(c);
        return;
    }
    ssize_t n = recv(c->fd, c->hbuf + c->hlen, HTTP_BUF - c->hlen, 0);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        drop(c);
        return;
    }
    c->hlen += (size_t)n;
    if (!c->expect) c->expect = http_expect(c);
    if (c->expect && c->hlen >= c->expect) complete(c);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(double p) {
    if (lat_n == 0) return 0.0;
    size_t k = (size_t)(p * (double)lat_n + 0.999999);
    if (k < 1) k = 1;
    if (k > lat_n) k = lat_n;
    return lat[k - 1];
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *path = "/";
    int port = 0, conns = 10;
    double warmup = 0.5, duration = 3.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--mode")) mode_http = !strcmp(v, "http");
        else if (!strcmp(k, "--host")) host = v;
        else if (!strcmp(k, "--port")) port = atoi(v);
        else if (!strcmp(k, "--conns")) conns = atoi(v);
        else if (!strcmp(k, "--size")) msg_size = (size_t)atol(v);
        else if (!strcmp(k, "--warmup")) warmup = atof(v);
        else if (!strcmp(k, "--duration")) duration = atof(v);
        else if (!strcmp(k, "--path")) path = v;
        else {
            fprintf(stderr, "loadgen: unknown option %s\n", k);
            return 2;
        }
    }
    if (port <= 0 || conns <= 0 || msg_size == 0) {
        fprintf(stderr, "loadgen: --port, --conns and --size must be positive\n");
        return 2;
    }
    char *buf;
    if (mode_http) {
        buf = malloc(512);
        snprintf(buf, 512, "GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n", path, host, port);
        req_len = strlen(buf);
    } else {
        buf = malloc(msg_size);
        for (size_t i = 0; i < msg_size; i++) buf[i] = (char)('a' + i % 26);
        req_len = msg_size;
    }
    req = buf;

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "loadgen: --host must be a numeric IPv4 address\n");
        return 2;
    }
    epfd = epoll_create1(0);
    conn_t *cs = calloc((size_t)conns, sizeof(conn_t));
    for (int i = 0; i < conns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
            perror("loadgen: connect");
            return 1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
            perror("loadgen: O_NONBLOCK");
            return 1;
        }
        cs[i].fd = fd;
        cs[i].alive = 1;
        cs[i].hbuf = mode_http ? malloc(HTTP_BUF) : NULL;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }

    size_t scratch_len = 1 << 18;
    char *scratch = malloc(scratch_len);
    struct epoll_event events[256];
    double t0 = now();
    double t_measure = t0 + warmup, t_end = t_measure + duration;
    double m_start = t0, m_end = t0, cpu0 = 0.0, cpu1 = 0.0;
    for (int i = 0; i < conns; i++) start_request(&cs[i], t0);
    if (warmup <= 0.0) {
        measuring = 1;
        cpu0 = cpu_seconds();
    }
    for (;;) {
        int n = epoll_wait(epfd, events, 256, 5);
        if (n < 0 && errno != EINTR) {
            perror("loadgen: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (!c->alive) continue;
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) on_readable(c, scratch, scratch_len);
            if (c->alive && (events[i].events & EPOLLOUT)) try_send(c);
        }
        double t = now();
        if (!measuring && t >= t_measure) {
            measuring = 1;
            m_start = t;
            cpu0 = cpu_seconds();
        }
        if (measuring && t >= t_end) {
            m_end = t;
            cpu1 = cpu_seconds();
            finished = 1;
            break;
        }
        if (errors >= conns) {
            fprintf(stderr, "loadgen: every connection failed\n");
            return 1;
        }
    }
    double elapsed = m_end - m_start;
    qsort(lat, lat_n, sizeof(double), cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < lat_n; i++) sum += lat[i];
    printf(
        "{\"client\": \"c\", \"mode\": \"%s\", \"conns\": %d, \"size\": %zu, \"requests\": %lld, "
        "\"duration\": %.6f, \"rps\": %.3f, \"p50_ms\": %.6f, \"p99_ms\": %.6f, "
        "\"mean_ms\": %.6f, \"cpu_s\": %.6f, \"cpu_frac\": %.4f, \"errors\": %lld}\n",
        mode_http ? "http" : "echo", conns, msg_size, completed, elapsed,
        elapsed > 0 ? (double)completed / elapsed : 0.0, percentile(0.50) * 1e3,
        percentile(0.99) * 1e3, lat_n ? sum / (double)lat_n * 1e3 : 0.0, cpu1 - cpu0,
        elapsed > 0 ? (cpu1 - cpu0) / elapsed : 0.0, errors);
    fflush(stdout);
    for (int i = 0; i < conns; i++)
        if (cs[i].alive) close(cs[i].fd);
    return 0;
}
