/* evmbpf's own privileges, from capget(2): what loading, attaching and reading the
 * target need, checked before anything is tried. */
#ifndef EVMBPF_PRIVILEGES_H
#define EVMBPF_PRIVILEGES_H

/* Read the effective capabilities; -1 (and one line on stderr naming the missing ones)
 * when a trace cannot work with them. */
int privileges_check(void);
/* Is this capability (CAP_*) effective? Valid after privileges_check(). */
int has_cap(int cap);

#endif
