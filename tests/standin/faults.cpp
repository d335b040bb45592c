// Stand-in kernels for the fault-injection tests (tests/test_faults.py), built
// by the node with g++ like standin.cpp. None reads the card: each prints the
// pass marker of tests/nodes.py ("standin: PASS") when it gets that far.
//
// Behaviour, chosen at compile time:
//   MODE_SLOWPASS   "standin: started", sleeps SLEEP_S seconds, then passes
//   MODE_STUBBORN   ignores SIGTERM, forks a child that ignores it too, and
//                   both sleep forever: only `timeout -k`'s KILL ends them
//   MODE_FLOOD      prints FLOOD_MIB MiB on stdout, then its pass marker as the last line
//   MODE_DAEMON     double-forks a grandchild into a session of its own (setsid),
//                   which sleeps forever out of the kernel's process group, then passes
//   MODE_BADUTF8    passes, then 200,000 x U+20AC (3 bytes each) written in
//                   7-byte pieces (characters split across writes), then bytes
//                   that are not UTF-8; a little of both on stderr too
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(MODE_SLOWPASS) && !defined(MODE_STUBBORN) && !defined(MODE_FLOOD) && !defined(MODE_BADUTF8) && \
    !defined(MODE_DAEMON)
#error "choose a behaviour: -DMODE_SLOWPASS, -DMODE_STUBBORN, -DMODE_FLOOD, -DMODE_BADUTF8 or -DMODE_DAEMON"
#endif
#ifndef SLEEP_S
#define SLEEP_S 3
#endif
#ifndef FLOOD_MIB
#define FLOOD_MIB 100
#endif

static void write_all(int fd, const char *data, size_t size) {
    while (size > 0) {
        ssize_t done = write(fd, data, size);
        if (done <= 0) exit(3);
        data += done;
        size -= (size_t)done;
    }
}

static void say(int fd, const char *text) { write_all(fd, text, strlen(text)); }

int main(void) {
#if defined(MODE_SLOWPASS)
    say(1, "standin: started\n");
    sleep(SLEEP_S);
    say(1, "standin: PASS\n");
    return 0;
#elif defined(MODE_DAEMON)
    // the kernel passes only once its daemon is in place (else the race with the
    // farm's group kill decides whether a daemon is left at all)
    int ready[2];
    if (pipe(ready) != 0) return 4;
    pid_t middle = fork();
    if (middle == 0) {
        setsid();
        if (fork() == 0) {
            close(0), close(1), close(2), close(ready[0]), close(ready[1]);
            for (;;) pause();
        }
        if (write(ready[1], "r", 1) != 1) _exit(1);
        _exit(0);
    }
    char got;
    close(ready[1]);
    if (read(ready[0], &got, 1) != 1) return 5;
    // the middle process gone too: on a busy machine it was still exiting when the farm
    // looked for leftovers, and counted as a second one
    if (middle < 0 || waitpid(middle, NULL, 0) != middle) return 6;
    say(1, "standin: PASS\n");
    return 0;
#elif defined(MODE_STUBBORN)
    signal(SIGTERM, SIG_IGN);
    say(1, "standin: ignoring SIGTERM\n");
    if (fork() == 0) {
        for (;;) pause();
    }
    for (;;) pause();
#elif defined(MODE_FLOOD)
    // 1 MiB of 64-byte lines, FLOOD_MIB times
    static char block[1 << 20];
    for (size_t i = 0; i < sizeof block; i += 64) {
        memset(block + i, 'x', 63);
        block[i + 63] = '\n';
    }
    for (int i = 0; i < FLOOD_MIB; ++i) write_all(1, block, sizeof block);
    say(1, "standin: PASS\n");  // after FLOOD_MIB MiB: the marker is found only in the whole stream
    say(2, "standin: flooded stdout\n");
    return 0;
#elif defined(MODE_BADUTF8)
    say(1, "standin: PASS\n");
    static char euros[200000 * 3];
    for (size_t i = 0; i < sizeof euros; i += 3) memcpy(euros + i, "\xe2\x82\xac", 3);
    for (size_t i = 0; i < sizeof euros; i += 7) {
        write_all(1, euros + i, sizeof euros - i < 7 ? sizeof euros - i : 7);
    }
    // a lone continuation byte, two bytes never valid in UTF-8, a truncated sequence
    static const char tail[] = "\n\x80|\xff\xfe|\xe2\x82\n";
    write_all(1, tail, sizeof tail - 1);
    static const char err[] = "stderr \xe2\x82\xac \xc3\x28 end\n";
    write_all(2, err, sizeof err - 1);
    return 0;
#endif
}
