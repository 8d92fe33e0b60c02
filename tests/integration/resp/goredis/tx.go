// Transactions and blocking pops (memshift: keys under one hash tag):
// go run . HOST:PORT PROTOCOL tx
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

func txWorkload(ctx context.Context, r *redis.Client, addr string, proto int, show func(string, redis.Cmder)) {
	other := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
	show("flushall", r.FlushAll(ctx))
	cmds, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{g}a", "1", 0)
		p.Incr(ctx, "{g}a")
		p.Get(ctx, "{g}a")
		p.MGet(ctx, "{g}a", "{g}b")
		p.HSet(ctx, "{g}h", "f", "v")
		p.HGetAll(ctx, "{g}h")
		p.Ping(ctx)
		return nil
	})
	fmt.Printf("txpipelined err=%v n=%d\n", err, len(cmds))
	for i, c := range cmds {
		show(fmt.Sprintf("tx %d", i), c)
	}
	_, err = r.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{g}s", "x", 0)
		p.LPush(ctx, "{g}s", "y")
		return nil
	})
	fmt.Printf("txpipelined wrong type err=%v\n", err)
	err = r.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, "{g}a").Int()
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "{g}a", n*10, 0)
			return nil
		})
		return err
	}, "{g}a")
	fmt.Printf("watch err=%v\n", err)
	show("after watch", r.Get(ctx, "{g}a"))
	err = r.Watch(ctx, func(tx *redis.Tx) error {
		n, _ := tx.Get(ctx, "{g}a").Int()
		other.Set(ctx, "{g}a", 999, 0)
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "{g}a", n+1, 0)
			return nil
		})
		return err
	}, "{g}a")
	fmt.Printf("watch conflict err=%v txfailed=%v\n", err, err == redis.TxFailedErr)
	show("after conflict", r.Get(ctx, "{g}a"))
	show("blpop timeout", r.BLPop(ctx, time.Second, "{g}q"))
	go func() {
		time.Sleep(300 * time.Millisecond)
		other.RPush(ctx, "{g}q", "pushed")
	}()
	show("blpop woken", r.BLPop(ctx, 0, "{g}q"))
}
