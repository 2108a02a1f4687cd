/* The kernel's preemption model (preempt.h), from the build's flags in uname's version
 * ("SMP PREEMPT_DYNAMIC", "PREEMPT", "PREEMPT_LAZY", "PREEMPT_RT": scripts/mkcompile_h
 * names the model the kernel was built with, PREEMPT for full) and a dynamic kernel's
 * preempt= on its command line. debugfs's sched/preempt would tell a mode switched
 * later, but it is not opened: under lockdown each open leaves a line in the kernel's
 * log ("debugfs access is restricted"), at every trace's start. */
#include "preempt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "util.h"

static int mode_preempts(const char *mode)
{
	if (!strcmp(mode, "none") || !strcmp(mode, "voluntary"))
		return KPREEMPT_NO;
	if (!strcmp(mode, "full") || !strcmp(mode, "lazy"))
		return KPREEMPT_YES;
	return KPREEMPT_UNKNOWN;
}

/* preempt=MODE on the kernel's command line, or "" */
static void cmdline_mode(char *mode, size_t cap)
{
	char line[4096] = "";
	mode[0] = 0;
	FILE *f = fopen("/proc/cmdline", "r");
	if (!f)
		return;
	size_t n = fread(line, 1, sizeof(line) - 1, f);
	fclose(f);
	line[n] = 0;
	for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n"))
		if (!strncmp(tok, "preempt=", 8))
			snprintf(mode, cap, "%s", tok + 8);
}

/* Is word one of version's space-separated words? */
static int has_word(const char *version, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = version; (p = strstr(p, word)); p += n)
		if ((p == version || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return 1;
	return 0;
}

int kernel_preemption(char *how, size_t cap)
{
	char mode[32];
	struct utsname u;
	if (uname(&u)) {
		snprintf(how, cap, "unknown (uname failed)");
		return KPREEMPT_UNKNOWN;
	}
	if (has_word(u.version, "PREEMPT_RT")) {
		snprintf(how, cap, "PREEMPT_RT (uname -v)");
		return KPREEMPT_YES;
	}
	int preempts = has_word(u.version, "PREEMPT_LAZY") || has_word(u.version, "PREEMPT");
	const char *built = !preempts ? "none or voluntary"
			    : has_word(u.version, "PREEMPT_LAZY") ? "lazy" : "full";
	if (has_word(u.version, "PREEMPT_DYNAMIC")) {
		cmdline_mode(mode, sizeof(mode));
		if (mode[0]) {
			snprintf(how, cap, "%s (PREEMPT_DYNAMIC, preempt=%s on the command line)", mode,
				 mode);
			return mode_preempts(mode);
		}
		snprintf(how, cap, "%s (PREEMPT_DYNAMIC, the build's default: uname -v; a mode "
			 "switched later through debugfs is not seen)", built);
	} else {
		snprintf(how, cap, "%s (uname -v)", built);
	}
	return preempts ? KPREEMPT_YES : KPREEMPT_NO;
}

int preempt_guard_wanted(void)
{
	static int wanted = -1;
	if (wanted >= 0)
		return wanted;
	char how[160];
	int k = kernel_preemption(how, sizeof(how));
	const char *env = getenv("EVMBPF_PREEMPT_GUARD");
	if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) {
		wanted = env[0] == '1';
		debugx("kernel preemption: %s; the records' CPU check is %s (EVMBPF_PREEMPT_GUARD=%s)",
		       how, wanted ? "on" : "off", env);
		return wanted;
	}
	wanted = k != KPREEMPT_NO;
	debugx("kernel preemption: %s: %s", how,
	       wanted ? "a record built while another task's program ran on its CPU is dropped "
			"(and counted)"
		      : "a program runs to its end on its CPU, no record is checked");
	return wanted;
}
