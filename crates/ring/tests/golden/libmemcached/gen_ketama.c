/*
 * Golden vectors for memshift's `ketama` distribution, from libmemcached.
 *
 * usage: gen_ketama OUT.txt KEYS.txt host:port:weight...
 *
 * Builds a libmemcached client with MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED = 1
 * (what pylibmc's {"ketama_weighted": True} and PHP's
 * Memcached::OPT_LIBKETAMA_COMPATIBLE set: MD5 key hash, MD5 distribution
 * hash, MEMCACHED_DISTRIBUTION_CONSISTENT_WEIGHTED), adds the servers in
 * order with their weights, stores every key (<= 250 bytes) through it, then
 * connects to each server on its own and GETs every key to see where it
 * landed. Each key must be on exactly one server, and that server must be
 * the one memcached_generate_hash() reports. Keys over 250 bytes cannot be
 * stored; for them the chooser (memcached_generate_hash) is recorded.
 *
 * The memcached servers must be running (generate.sh starts them).
 */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERVERS 64
#define MAX_KEYS 4096
#define MAX_KEY 512

struct server {
  char host[300];
  unsigned port;
  unsigned weight;
  memcached_st *alone;
};

static void die(const char *what, memcached_st *m, memcached_return_t rc) {
  fprintf(stderr, "gen_ketama: %s: %s\n", what, m ? memcached_last_error_message(m) : memcached_strerror(NULL, rc));
  exit(1);
}

static int unhex(const char *s, unsigned char *out, size_t cap) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
  if (n % 2 || n / 2 > cap) return -1;
  for (size_t i = 0; i < n / 2; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (unsigned char) v;
  }
  return (int) (n / 2);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s OUT.txt KEYS.txt host:port:weight...\n", argv[0]);
    return 2;
  }
  const char *out_path = argv[1];
  int nservers = argc - 3;
  if (nservers > MAX_SERVERS) return 2;
  struct server servers[MAX_SERVERS];

  memcached_st *m = memcached_create(NULL);
  memcached_return_t rc = memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1);
  if (rc != MEMCACHED_SUCCESS) die("KETAMA_WEIGHTED", m, rc);

  for (int i = 0; i < nservers; i++) {
    char spec[300];
    snprintf(spec, sizeof spec, "%s", argv[3 + i]);
    char *w = strrchr(spec, ':');
    if (!w) return 2;
    *w++ = 0;
    char *p = strrchr(spec, ':');
    if (!p) return 2;
    *p++ = 0;
    snprintf(servers[i].host, sizeof servers[i].host, "%s", spec);
    servers[i].port = (unsigned) atoi(p);
    servers[i].weight = (unsigned) atoi(w);
    rc = memcached_server_add_with_weight(m, servers[i].host, (in_port_t) servers[i].port, servers[i].weight);
    if (rc != MEMCACHED_SUCCESS) die("server_add_with_weight", m, rc);

    servers[i].alone = memcached_create(NULL);
    rc = memcached_server_add(servers[i].alone, servers[i].host, (in_port_t) servers[i].port);
    if (rc != MEMCACHED_SUCCESS) die("server_add (alone)", servers[i].alone, rc);
    rc = memcached_flush(servers[i].alone, 0);
    if (rc != MEMCACHED_SUCCESS) die("flush", servers[i].alone, rc);
  }

  /* The mode actually in effect, recorded in the fixture header. */
  uint64_t weighted = memcached_behavior_get(m, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED);
  uint64_t dist = memcached_behavior_get(m, MEMCACHED_BEHAVIOR_DISTRIBUTION);
  uint64_t key_hash = memcached_behavior_get(m, MEMCACHED_BEHAVIOR_HASH);
  uint64_t sort_hosts = memcached_behavior_get(m, MEMCACHED_BEHAVIOR_SORT_HOSTS);
  if (weighted != 1 || dist != MEMCACHED_DISTRIBUTION_CONSISTENT_WEIGHTED || key_hash != MEMCACHED_HASH_MD5
      || sort_hosts != 0)
  {
    fprintf(stderr, "gen_ketama: unexpected mode weighted=%llu dist=%llu hash=%llu sort=%llu\n",
            (unsigned long long) weighted, (unsigned long long) dist, (unsigned long long) key_hash,
            (unsigned long long) sort_hosts);
    return 1;
  }

  FILE *kf = fopen(argv[2], "r");
  if (!kf) {
    perror(argv[2]);
    return 1;
  }
  static char hex[MAX_KEYS][2 * MAX_KEY + 2];
  static unsigned char keys[MAX_KEYS][MAX_KEY];
  static int lens[MAX_KEYS];
  int nkeys = 0;
  while (nkeys < MAX_KEYS && fgets(hex[nkeys], sizeof hex[nkeys], kf)) {
    lens[nkeys] = unhex(hex[nkeys], keys[nkeys], MAX_KEY);
    if (lens[nkeys] <= 0) {
      fprintf(stderr, "gen_ketama: bad key line %d\n", nkeys + 1);
      return 1;
    }
    hex[nkeys][2 * lens[nkeys]] = 0;
    nkeys++;
  }
  fclose(kf);

  /* Store every storable key through the ketama client. */
  for (int k = 0; k < nkeys; k++) {
    if (lens[k] > 250) continue;
    char value[32];
    int vlen = snprintf(value, sizeof value, "v%d", k);
    rc = memcached_set(m, (const char *) keys[k], (size_t) lens[k], value, (size_t) vlen, 0, 0);
    if (rc != MEMCACHED_SUCCESS) {
      fprintf(stderr, "gen_ketama: set key %s: %s\n", hex[k], memcached_last_error_message(m));
      return 1;
    }
  }

  FILE *out = fopen(out_path, "w");
  if (!out) {
    perror(out_path);
    return 1;
  }
  fprintf(out, "# Golden vectors for memshift's `ketama` distribution.\n");
  fprintf(out, "# Generated by crates/ring/tests/golden/libmemcached/gen_ketama.c with libmemcached %s\n",
          LIBMEMCACHED_VERSION_STRING);
  fprintf(out, "# (MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED=1: distribution CONSISTENT_WEIGHTED, key hash MD5,\n");
  fprintf(out, "# no host sorting), servers added in order with memcached_server_add_with_weight.\n");
  fprintf(out, "# Lines: key (hex), server index, 'stored' = set through libmemcached and found by GETting\n");
  fprintf(out, "# every server directly, 'chooser' = key over 250 bytes, memcached_generate_hash().\n");
  fprintf(out, "distribution ketama\n");
  for (int i = 0; i < nservers; i++) {
    fprintf(out, "server %s:%u %u\n", servers[i].host, servers[i].port, servers[i].weight);
  }

  int per_server[MAX_SERVERS] = {0};
  for (int k = 0; k < nkeys; k++) {
    uint32_t chosen = memcached_generate_hash(m, (const char *) keys[k], (size_t) lens[k]);
    if (lens[k] > 250) {
      fprintf(out, "%s %u chooser\n", hex[k], chosen);
      continue;
    }
    char want[32];
    snprintf(want, sizeof want, "v%d", k);
    int found = -1;
    for (int i = 0; i < nservers; i++) {
      size_t vlen = 0;
      uint32_t flags = 0;
      char *v = memcached_get(servers[i].alone, (const char *) keys[k], (size_t) lens[k], &vlen, &flags, &rc);
      if (v) {
        if (vlen != strlen(want) || memcmp(v, want, vlen) != 0 || found >= 0) {
          fprintf(stderr, "gen_ketama: key %s: unexpected copy on server %d\n", hex[k], i);
          return 1;
        }
        found = i;
        free(v);
      } else if (rc != MEMCACHED_NOTFOUND) {
        die("get", servers[i].alone, rc);
      }
    }
    if (found < 0) {
      fprintf(stderr, "gen_ketama: key %s found on no server\n", hex[k]);
      return 1;
    }
    if ((uint32_t) found != chosen) {
      fprintf(stderr, "gen_ketama: key %s stored on %d but generate_hash says %u\n", hex[k], found, chosen);
      return 1;
    }
    per_server[found]++;
    fprintf(out, "%s %d stored\n", hex[k], found);
  }
  fclose(out);

  fprintf(stderr, "gen_ketama: %s: %d keys; per server:", out_path, nkeys);
  for (int i = 0; i < nservers; i++) fprintf(stderr, " %d", per_server[i]);
  fprintf(stderr, "\n");

  for (int i = 0; i < nservers; i++) memcached_free(servers[i].alone);
  memcached_free(m);
  return 0;
}
