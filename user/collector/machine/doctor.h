/* evmbpf doctor: can this machine, and this process, be traced? If not, why, and what
 * to do. One line per check. */
#ifndef EVMBPF_DOCTOR_H
#define EVMBPF_DOCTOR_H

/* `evmbpf doctor [--pid PID]` (argv[0] is "doctor"): 0 only when a trace would work. */
int doctor_main(int argc, char **argv);

#endif
