/* The version of evmbpf: what `evmbpf --version` prints and what the trace header's
 * `tracer` object says. The one place it is written; docs/evmbpf.8's title line must
 * say the same (tests/test_cli.py checks it). */
#ifndef EVMBPF_VERSION_H
#define EVMBPF_VERSION_H

#define EVMBPF_VERSION "0.1"

#endif
