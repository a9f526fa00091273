/*
 * What a job's container may do to its machine and its neighbours, tried from inside it (the
 * container tests build this statically into the test image as /jobs/wall-probe):
 *
 *   wall-probe powers <folder>   prints one JSON line: the capabilities and no-new-privs flag the
 *                                 kernel gives it, whether it may open a raw packet socket or a
 *                                 raw IP socket, make a device node or a setuid file in <folder>,
 *                                 and the mount options <folder> has
 *   wall-probe forks <n>         forks until the kernel refuses (or n children), prints how many
 *                                 it had and the refusal's errno name, and exits 0
 *
 * It always exits 0 once it has printed: the test reads what it found.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

static const char *err_name(int e) {
  switch (e) {
  case 0: return "ok";
  case EPERM: return "EPERM";
  case EACCES: return "EACCES";
  case EAGAIN: return "EAGAIN";
  case ENOMEM: return "ENOMEM";
  case EROFS: return "EROFS";
  default: return "other";
  }
}

static void status_field(const char *name, char *out, size_t size) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t n = strlen(name);
  snprintf(out, size, "?");
  if (!f) return;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, name, n) == 0 && line[n] == ':') {
      char *v = line + n + 1;
      while (*v == ' ' || *v == '\t') v++;
      v[strcspn(v, "\n")] = 0;
      snprintf(out, size, "%s", v);
    }
  fclose(f);
}

/* The per-mount options (field 6) of the mount at `target` in /proc/self/mountinfo. */
static void mount_options(const char *target, char *out, size_t size) {
  FILE *f = fopen("/proc/self/mountinfo", "r");
  char line[4096];
  snprintf(out, size, "?");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    char *fields[6];
    char *save = NULL, *tok = strtok_r(line, " ", &save);
    int i = 0;
    while (tok && i < 6) {
      fields[i++] = tok;
      tok = strtok_r(NULL, " ", &save);
    }
    if (i == 6 && strcmp(fields[4], target) == 0) snprintf(out, size, "%s", fields[5]);
  }
  fclose(f);
}

static int try_socket(int domain, int type, int protocol) {
  int s = socket(domain, type, protocol);
  if (s >= 0) {
    close(s);
    return 0;
  }
  return errno;
}

static int powers(const char *folder) {
  char cap[64], nnp[16], opts[512], path[4096];
  status_field("CapEff", cap, sizeof cap);
  status_field("NoNewPrivs", nnp, sizeof nnp);
  mount_options(folder, opts, sizeof opts);
  int packet = try_socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  int rawip = try_socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
  snprintf(path, sizeof path, "%s/probe-device", folder);
  int mk = mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0 ? 0 : errno;
  /* A setuid file of its own: allowed to its owner, but worth nothing on a nosuid mount. */
  snprintf(path, sizeof path, "%s/probe-setuid", folder);
  int setuid_bit = -1;
  int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0755);
  if (fd >= 0) {
    close(fd);
    setuid_bit = chmod(path, 04755) == 0 ? 0 : errno;
  } else setuid_bit = errno;
  printf("{\"uid\":%d,\"capEff\":\"%s\",\"noNewPrivs\":\"%s\",\"packetSocket\":\"%s\",\"rawSocket\":\"%s\","
         "\"mknod\":\"%s\",\"setuidFile\":\"%s\",\"mountOptions\":\"%s\"}\n",
         (int)getuid(), cap, nnp, err_name(packet), err_name(rawip), err_name(mk), err_name(setuid_bit), opts);
  return 0;
}

static int forks(long most) {
  long n = 0;
  int refused = 0;
  while (n < most) {
    pid_t p = fork();
    if (p < 0) {
      refused = errno;
      break;
    }
    if (p == 0) {
      pause();
      _exit(0);
    }
    n++;
  }
  printf("{\"children\":%ld,\"refused\":\"%s\"}\n", n, err_name(refused));
  fflush(stdout);
  signal(SIGTERM, SIG_IGN);
  kill(0, SIGTERM); /* its children go with it */
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "powers") == 0) return powers(argv[2]);
  if (argc == 3 && strcmp(argv[1], "forks") == 0) return forks(atol(argv[2]));
  fprintf(stderr, "usage: %s powers <folder> | forks <n>\n", argv[0]);
  return 2;
}
