// A scripted go-redis workload: run against memshift's RESP port and
// against one plain Redis, it must print the same lines.
// usage: go run . HOST:PORT PROTOCOL(2|3) [tx]
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	proto, _ := strconv.Atoi(os.Args[2])
	ctx := context.Background()
	r := redis.NewClient(&redis.Options{Addr: os.Args[1], Protocol: proto, ReadTimeout: 20 * time.Second})
	show := func(label string, cmd redis.Cmder) {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			fmt.Printf("%s error: %v\n", label, err)
			return
		}
		fmt.Printf("%s %v\n", label, cmd)
	}
	if len(os.Args) > 3 && os.Args[3] == "tx" {
		txWorkload(ctx, r, os.Args[1], proto, show)
		fmt.Println("GO WORKLOAD DONE")
		return
	}
	show("flushall", r.FlushAll(ctx))
	show("set", r.Set(ctx, "g:s", "hello", 0))
	show("get", r.Get(ctx, "g:s"))
	show("get missing", r.Get(ctx, "g:nope"))
	show("setnx", r.SetNX(ctx, "g:s", "x", 0))
	show("set ex", r.Set(ctx, "g:e", "v", 1000*time.Second))
	show("append", r.Append(ctx, "g:s", " world"))
	show("strlen", r.StrLen(ctx, "g:s"))
	show("getrange", r.GetRange(ctx, "g:s", 0, 4))
	show("incr", r.Incr(ctx, "g:n"))
	show("incrby", r.IncrBy(ctx, "g:n", 41))
	show("incrbyfloat", r.IncrByFloat(ctx, "g:f", 1.25))
	show("incr non-int", r.Incr(ctx, "g:s"))
	show("getdel", r.GetDel(ctx, "g:e"))
	keys := []string{}
	pairs := []interface{}{}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("g:mk:%d", i)
		keys = append(keys, k)
		pairs = append(pairs, k, "v"+k)
	}
	show("mset", r.MSet(ctx, pairs...))
	// SCAN across the shards: every key once (sorted: the order is each server's own).
	scanned := []string{}
	iter := r.Scan(ctx, 0, "g:mk:*", 7).Iterator()
	for iter.Next(ctx) {
		scanned = append(scanned, iter.Val())
	}
	sort.Strings(scanned)
	fmt.Printf("scan %d %v %v\n", len(scanned), scanned, iter.Err())
	listed := r.Keys(ctx, "g:mk:1*").Val()
	sort.Strings(listed)
	fmt.Printf("keys %v\n", listed)
	show("mget", r.MGet(ctx, append(keys, "g:nope")...))
	show("exists", r.Exists(ctx, keys...))
	show("del", r.Del(ctx, keys...))
	show("hset", r.HSet(ctx, "g:h", "a", "1", "b", "2"))
	show("hgetall", r.HGetAll(ctx, "g:h"))
	show("hincrby", r.HIncrBy(ctx, "g:h", "a", 5))
	show("rpush", r.RPush(ctx, "g:l", "a", "b", "c"))
	show("lrange", r.LRange(ctx, "g:l", 0, -1))
	show("sadd", r.SAdd(ctx, "g:st", "x", "y"))
	show("smembers count", r.SCard(ctx, "g:st"))
	show("zadd", r.ZAdd(ctx, "g:z", redis.Z{Score: 1.5, Member: "a"}, redis.Z{Score: 3, Member: "b"}))
	show("zscore", r.ZScore(ctx, "g:z", "a"))
	show("zrange withscores", r.ZRangeWithScores(ctx, "g:z", 0, -1))
	show("zincrby", r.ZIncrBy(ctx, "g:z", 2, "a"))
	show("expire", r.Expire(ctx, "g:h", 1000*time.Second))
	ttl := r.TTL(ctx, "g:h").Val()
	fmt.Printf("ttl in range %v\n", ttl > 990*time.Second && ttl <= 1000*time.Second)
	show("type", r.Type(ctx, "g:z"))
	show("eval", r.Eval(ctx, "return redis.call('HGET', KEYS[1], ARGV[1])", []string{"g:h"}, "a"))
	pipe := r.Pipeline()
	cmds := []redis.Cmder{}
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("g:p:%d", i%13)
		if i%2 == 0 {
			cmds = append(cmds, pipe.Set(ctx, k, i, 0))
		} else {
			cmds = append(cmds, pipe.Get(ctx, k))
		}
	}
	pipe.Exec(ctx)
	for i, c := range cmds {
		show(fmt.Sprintf("pipeline %d", i), c)
	}
	show("dbsize", r.DBSize(ctx))
	pubsubWorkload(ctx, r)
	fmt.Println("GO WORKLOAD DONE")
}
