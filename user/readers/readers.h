/* Offline trace readers: evmbpf summarize | show | forwards | export. No root, no BPF. */
#ifndef EVMBPF_READERS_H
#define EVMBPF_READERS_H

/* argv[0] is the sub-command ("summarize", "show", "forwards" or "export"). Returns the exit code. */
int readers_main(int argc, char **argv);

#endif
