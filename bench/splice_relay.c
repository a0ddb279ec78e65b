/* The floor row of bench/egress.py: the cheapest TCP relay this kernel allows, with no interpreter in it.
 *
 * splice_relay TARGET_IPV4 TARGET_PORT, with a listening TCP socket as standard input (inetd's "wait" style): for
 * each connection on it, connect to the target and move bytes both ways with blocking splice(2) through a 1 MiB pipe, one
 * thread per direction, passing each direction's end on with shutdown(SHUT_WR). Connections are served one at a
 * time, which is all the bench asks of it. It parses nothing and decides nothing, so whatever the egress proxy
 * costs beyond this row is Python's (or trio's); what this row costs against a direct download is the relay hop
 * itself: one more TCP connection and one more process on the CPUs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define PIPE_SIZE (1 << 20)

struct direction {
    int from, to;
};

static void *pump(void *arg) {
    const struct direction *d = arg;
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) == 0) {
        fcntl(pipe_fds[1], F_SETPIPE_SZ, PIPE_SIZE);
        ssize_t in;
        while ((in = splice(d->from, NULL, pipe_fds[1], NULL, PIPE_SIZE, SPLICE_F_MOVE)) > 0) {
            while (in > 0) {
                ssize_t out = splice(pipe_fds[0], NULL, d->to, NULL, (size_t)in, SPLICE_F_MOVE);
                if (out <= 0) {
                    in = -1;
                    break;
                }
                in -= out;
            }
            if (in < 0) break;
        }
        close(pipe_fds[0]);
        close(pipe_fds[1]);
    }
    shutdown(d->to, SHUT_WR);
    return NULL;
}

int main(int argc, char **argv) {
    const int listener = 0;
    if (argc != 3) {
        fprintf(stderr, "usage: splice_relay TARGET_IPV4 TARGET_PORT (a listening socket on stdin)\n");
        return 2;
    }
    int one = 1;
    struct sockaddr_in target = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &target.sin_addr) != 1) {
        fprintf(stderr, "splice_relay: bad address %s\n", argv[1]);
        return 2;
    }
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) {
            perror("splice_relay: accept");
            return 1;
        }
        int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (upstream >= 0 && connect(upstream, (struct sockaddr *)&target, sizeof target) == 0) {
            setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            struct direction out = {client, upstream}, back = {upstream, client};
            pthread_t out_thread, back_thread;
            pthread_create(&out_thread, NULL, pump, &out);
            pthread_create(&back_thread, NULL, pump, &back);
            pthread_join(out_thread, NULL);
            pthread_join(back_thread, NULL);
        }
        if (upstream >= 0) close(upstream);
        close(client);
    }
}
