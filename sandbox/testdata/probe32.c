/*
 * probe32: a 64-bit static program that makes its network system calls
 * through the i386 ABI (int $0x80). A seccomp filter that only inspects
 * x86_64 system call numbers lets these through unless it refuses foreign
 * architectures. Built by the sandbox tests with
 *   gcc -O0 -static -fno-pie -no-pie -o probe32 probe32.c
 * so that its data lies below 4 GiB, where 32-bit pointers reach it.
 *
 *   probe32 connect PORT    socket(AF_INET, SOCK_STREAM) + connect to 127.0.0.1:PORT
 *   probe32 entry           getpid through int $0x80: whether this kernel has the
 *                           i386 entry at all (without it the instruction faults)
 *
 * Output follows the Go probe: "ok" (exit 0) or "errno=N NAME at OP" (exit 1).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define I386_GETPID 20
#define I386_SOCKET 359
#define I386_CONNECT 362

static struct {
	uint16_t family;
	uint16_t port;
	uint32_t addr;
	uint8_t zero[8];
} sa;

static long int80(long nr, long a, long b, long c)
{
	long ret;
	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "a"(nr), "b"(a), "c"(b), "d"(c)
			 : "memory", "r8", "r9", "r10", "r11");
	return ret;
}

static const char *errname(long e)
{
	switch (e) {
	case 1: return "EPERM";
	case 13: return "EACCES";
	case 38: return "ENOSYS";
	case 111: return "ECONNREFUSED";
	}
	return "E?";
}

static int failed(long r, const char *op)
{
	printf("errno=%ld %s at %s\n", -r, errname(-r), op);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "entry") == 0) {
		long pid = int80(I386_GETPID, 0, 0, 0);
		if (pid <= 0)
			return failed(pid, "getpid");
		printf("ok\n");
		return 0;
	}
	if (argc != 3 || strcmp(argv[1], "connect") != 0) {
		fprintf(stderr, "usage: probe32 connect PORT\n");
		return 2;
	}
	if ((uintptr_t)&sa > 0xffffffffu) {
		fprintf(stderr, "probe32: data above 4 GiB; build with -no-pie\n");
		return 2;
	}
	int port = atoi(argv[2]);
	long fd = int80(I386_SOCKET, 2 /* AF_INET */, 1 /* SOCK_STREAM */, 0);
	if (fd < 0)
		return failed(fd, "socket");
	sa.family = 2;
	sa.port = (uint16_t)(((port & 0xff) << 8) | ((port >> 8) & 0xff));
	sa.addr = 0x0100007f; /* 127.0.0.1 in network order */
	long r = int80(I386_CONNECT, fd, (long)(uintptr_t)&sa, sizeof sa);
	if (r < 0)
		return failed(r, "connect");
	printf("ok\n");
	return 0;
}
