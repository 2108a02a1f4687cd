/* Links closed off the loop (closer.h). A queue and up to CLOSERS threads, made as they
 * are needed; each takes a link and closes it. */
#include "closer.h"

#include <pthread.h>
#include <stdlib.h>

#include "uprobes.h"
#include "util.h"

#define CLOSERS 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t more = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static struct probe **queue;
static size_t nqueue, cap;
static int threads, idle, busy, on;

static void *closer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!nqueue) {
			idle++;
			pthread_cond_wait(&more, &mu);
			idle--;
		}
		struct probe *l = queue[--nqueue];
		busy++;
		pthread_mutex_unlock(&mu);
		probe_close(l);
		pthread_mutex_lock(&mu);
		busy--;
		if (!nqueue && !busy)
			pthread_cond_broadcast(&done);
	}
	return NULL;
}

void closer_start(void)
{
	on = 1;
}

int closer_on(void)
{
	return on;
}

void closer_put(struct probe *l)
{
	if (!l)
		return;
	if (!on) {
		probe_close(l);
		return;
	}
	pthread_mutex_lock(&mu);
	if (nqueue == cap) {
		size_t ncap = cap ? cap * 2 : 64;
		struct probe **q = realloc(queue, ncap * sizeof(*q));
		if (!q) { /* no memory: closed here */
			pthread_mutex_unlock(&mu);
			probe_close(l);
			return;
		}
		queue = q;
		cap = ncap;
	}
	queue[nqueue++] = l;
	if (idle) {
		pthread_cond_signal(&more);
	} else if (threads < CLOSERS) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&a, 64 << 10);
		if (!pthread_create(&t, &a, closer_main, NULL))
			threads++;
		else if (!threads) /* no thread: closed here */
			probe_close(queue[--nqueue]);
		pthread_attr_destroy(&a);
	}
	pthread_mutex_unlock(&mu);
}

void closer_wait(void)
{
	if (!on)
		return;
	uint64_t t0 = mono_ns();
	pthread_mutex_lock(&mu);
	while (nqueue || busy)
		pthread_cond_wait(&done, &mu);
	pthread_mutex_unlock(&mu);
	debugx("links closed: waited %.3f s for the last", (double)(mono_ns() - t0) / 1e9);
}
