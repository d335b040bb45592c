// A stand-in for a gated GPU kernel, built by the node with g++ so that the
// farm's pipeline can be tested end to end on machines without a GPU.
//
// Like the real kernels it learns the card's compute capability first (from
// `nvidia-smi --query-gpu=compute_cap`, the node's stand-in), refuses a card
// outside its gate with a fixed text on stderr and exit 1, and prints a pass
// marker on stdout when it "computes" correctly.
//
// Gate, chosen at compile time:    -DMIN_CC=75 (CC >= 7.5) or -DEXACT_CC=90
// Behaviour, chosen at compile time:
//   MODE_PASS       gate, then "standin: PASS"
//   MODE_FAILNUM    gate, then a numeric mismatch on stderr, exit 1
//   MODE_HANG       gate, then a child process and itself sleep forever
//   MODE_CRASH      gate, then abort() (SIGABRT, no core file)
//   MODE_NOGATE     never refuses: "standin: PASS" on any card
//   MODE_WRONGGATE  an off-by-one gate (> instead of >=): refuses MIN_CC itself
//   MODE_BROKEN     does not compile
//   MODE_RACE       passes, but has the race racecheck would report on a GPU
//   MODE_OOB        passes, but has the out-of-bounds write memcheck would report
//   MODE_SLOWSAN    passes, but under any sanitizer tool it never ends
// Under the compute-sanitizer stand-in (tests/nodes.py), which names its tool in
// STANDIN_SANITIZER_TOOL, a planted bug writes what the real tool would print
// on a real GPU to the file STANDIN_SANITIZER_REPORT names; with -DTAMPER_FILE='"PATH"'
// it also writes "forged" into PATH there, with -DSWAP_UNDER='"TOOL"' it swaps its own
// binary under that tool, and with -DPLANT_TMP_LINK='"PATH"' its run leaves a link to PATH
// in its work folder, named as a sanitizer's temporary folder was. With
// -DPRELUDE_FILE='"PATH"' it first runs `sh PATH` with its own stdout and stderr: a
// hostile kernel's doings, as the kernel's own (a run's other commands are not the kernel).
// With -DQUIET_UNDER='"TOOL"' it ends 0 under that tool before its pass line (a kernel that skips
// its work there), with -DFAIL_UNDER='"TOOL"' its self-check fails there (exit 1, no pass line).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(MODE_BROKEN)
#error "MODE_BROKEN: this stand-in is built to fail its build"
#elif !defined(MODE_PASS) && !defined(MODE_FAILNUM) && !defined(MODE_HANG) && \
    !defined(MODE_CRASH) && !defined(MODE_NOGATE) && !defined(MODE_WRONGGATE) && \
    !defined(MODE_RACE) && !defined(MODE_OOB) && !defined(MODE_SLOWSAN)
#error "choose a behaviour: -DMODE_PASS, -DMODE_FAILNUM, -DMODE_HANG, ..."
#endif

#if !defined(MIN_CC) && !defined(EXACT_CC)
#define MIN_CC 0
#endif

// The device's CC as an integer (7.5 -> 75), or -1 when it cannot be read. Like
// a CUDA program, it sees the GPU CUDA_VISIBLE_DEVICES names (the first one).
static int device_cc(void) {
    char command[512] = "nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null";
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible != NULL && visible[0] != '\0') {
        char first[128] = {0};
        sscanf(visible, "%127[^,]", first);
        for (const char *c = first; *c; c++) {
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '-'))
                return -1;
        }
        snprintf(command, sizeof command, "nvidia-smi -i %s --query-gpu=compute_cap --format=csv,noheader 2>/dev/null", first);
    }
    FILE *pipe = popen(command, "r");
    if (pipe == NULL) return -1;
    char line[64] = {0};
    char *got = fgets(line, sizeof line, pipe);
    int status = pclose(pipe);
    if (got == NULL || status != 0) return -1;
    int major = 0, minor = 0;
    if (sscanf(line, "%d.%d", &major, &minor) != 2) return -1;
    return major * 10 + minor;
}

static bool gate_admits(int cc) {
#if defined(MODE_NOGATE)
    (void)cc;
    return true;
#elif defined(EXACT_CC)
    return cc == EXACT_CC;
#elif defined(MODE_WRONGGATE)
    return cc > MIN_CC;  // the bug: MIN_CC itself is refused
#else
    return cc >= MIN_CC;
#endif
}

static int needed_cc(void) {
#if defined(EXACT_CC)
    return EXACT_CC;
#else
    return MIN_CC;
#endif
}

int main(void) {
#if defined(PRELUDE_FILE)
    fflush(stdout);
    if (system("sh " PRELUDE_FILE) == -1) return 1;
#endif
    int cc = device_cc();
    if (cc < 0) {
        fprintf(stderr, "standin: cannot read the device's compute capability (no nvidia-smi?)\n");
        return 1;
    }
    if (!gate_admits(cc)) {
        fprintf(stderr, "standin needs CC %d.%d and this device is %d.%d\n", needed_cc() / 10,
                needed_cc() % 10, cc / 10, cc % 10);
        return 1;
    }
    printf("standin: device CC %d.%d\n", cc / 10, cc % 10);
    fflush(stdout);
#if defined(MODE_FAILNUM)
    fprintf(stderr, "standin: mismatch at element 17: got 3.5, expected 4.25\n");
    return 1;
#elif defined(MODE_HANG)
    if (fork() == 0) {
        for (;;) pause();  // a child of the kernel, to check the whole group is killed
    }
    for (;;) pause();
#elif defined(MODE_CRASH)
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    abort();
#else
    const char *tool = getenv("STANDIN_SANITIZER_TOOL");
    const char *report = getenv("STANDIN_SANITIZER_REPORT");
    const char *finding = NULL;
#if defined(MODE_RACE)
    if (tool != NULL && strcmp(tool, "racecheck") == 0)
        finding = "Error: Race reported between Write access at block_sum(const int *, int *)+0x90 in race.cu:9\n"
                  "    and Read access at block_sum(const int *, int *)+0x1d0 in race.cu:14 [1020 hazards]\n";
#elif defined(MODE_OOB)
    if (tool != NULL && strcmp(tool, "memcheck") == 0)
        finding = "Invalid __global__ write of size 4 bytes\n"
                  "    at fill(int *, int)+0x70 in oob.cu:9\n"
                  "    by thread (232,0,0) in block (3,0,0)\n"
                  "    Access at 0x7f3c00000fa0 is out of bounds\n";
#elif defined(MODE_SLOWSAN)
    if (tool != NULL)
        for (;;) pause();
#endif
#if defined(PLANT_TMP_LINK)
    // in its run, a link where a sanitizer's private temporary folder once was made (work/.farm-tmp)
    if (tool == NULL && symlink(PLANT_TMP_LINK, ".farm-tmp") != 0) perror("standin: symlink");
#endif
#if defined(SWAP_UNDER)
    // under this tool, its own copy swapped for a program that always passes, for the tools after it
    if (tool != NULL && strcmp(tool, SWAP_UNDER) == 0) {
        char self[4096] = {0};
        if (readlink("/proc/self/exe", self, sizeof self - 1) > 0 && unlink(self) == 0) {
            FILE *fake = fopen(self, "w");
            if (fake != NULL) {
                fputs("#!/bin/sh\necho 'standin: PASS'\n", fake);
                fclose(fake);
                chmod(self, 0755);
            }
        }
    }
#endif
#if defined(TAMPER_FILE)
    // under a sanitizer tool, a write outside its work folder: refused where the farm confines it
    if (tool != NULL) {
        FILE *victim = fopen(TAMPER_FILE, "w");
        if (victim != NULL) {
            fputs("forged\n", victim);
            fclose(victim);
        }
    }
#endif
    if (finding != NULL && report != NULL) {
        FILE *out = fopen(report, "a");
        if (out != NULL) {
            fputs(finding, out);
            fclose(out);
        }
    }
#if defined(QUIET_UNDER)
    if (tool != NULL && strcmp(tool, QUIET_UNDER) == 0) {
        printf("standin: check skipped\n");
        return 0;
    }
#endif
#if defined(FAIL_UNDER)
    if (tool != NULL && strcmp(tool, FAIL_UNDER) == 0) {
        fprintf(stderr, "standin: mismatch at element 5 under the tool: got 0, expected 2\n");
        return 1;
    }
#endif
    printf("standin: PASS\n");
    return 0;
#endif
}
