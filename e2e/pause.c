/* The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on TERM/INT.
   Built static (gcc -static) into a one-file image: no registry to pull a pause image from. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { _exit(128 + sig); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    signal(SIGTERM, quit);
    signal(SIGINT, quit);
    signal(SIGCHLD, reap);
    for (;;)
        pause();
}
