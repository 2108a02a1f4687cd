"""A parent that waits for its child as a batch system's step daemon does: with
WUNTRACED and WCONTINUED, so that every stop and continue of the child is reported to it.
Usage: wuntraced_parent.py REPORT -- COMMAND... Writes one line per wait status to REPORT
("stopped SIG", "continued", "exited N", "killed SIG") and exits with the child's status,
as su and srun do."""
import os
import sys

report, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
pid = os.fork()
if pid == 0:
    os.execvp(command[0], command)
with open(report, "w") as out:
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED | os.WCONTINUED)
        if os.WIFSTOPPED(status):
            out.write(f"stopped {os.WSTOPSIG(status)}\n")
            out.flush()
            os.kill(pid, 18)  # SIGCONT: a job that stopped is let go, and it is said
        elif os.WIFCONTINUED(status):
            out.write("continued\n")
        elif os.WIFEXITED(status):
            out.write(f"exited {os.WEXITSTATUS(status)}\n")
            sys.exit(os.WEXITSTATUS(status))
        else:
            out.write(f"killed {os.WTERMSIG(status)}\n")
            sys.exit(128 + os.WTERMSIG(status))
