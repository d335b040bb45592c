/* A library a program of the run names in LD_PRELOAD when it asks the node's runner for the
   kernel (tests/forgers/ask_runner.py preload): loaded, it prints the pass marker and exits 0
   before the kernel's main. The runner gives the kernel the node's loader variables instead. */
#include <unistd.h>
__attribute__((constructor)) static void speak_for_the_kernel(void) {
    write(1, "standin: PASS\n", 14);
    _exit(0);
}
