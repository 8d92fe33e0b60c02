package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsubWorkload: go-redis' PubSub (Subscribe, PSubscribe, Receive,
// Publish, PUBSUB, Unsubscribe) with a publisher client `r`.
func pubsubWorkload(ctx context.Context, r *redis.Client) {
	sub := r.Subscribe(ctx, "g:news", "g:jobs")
	defer sub.Close()
	receive := func(n int) {
		for i := 0; i < n; i++ {
			m, err := sub.ReceiveTimeout(ctx, 10*time.Second)
			fmt.Printf("receive %#v %v\n", m, err)
		}
	}
	receive(2)
	if err := sub.PSubscribe(ctx, "g:user:*"); err != nil {
		fmt.Printf("psubscribe error: %v\n", err)
	}
	receive(1)
	fmt.Printf("numsub %v\n", r.PubSubNumSub(ctx, "g:news", "g:none").Val())
	fmt.Printf("numpat %v\n", r.PubSubNumPat(ctx).Val())
	fmt.Printf("channels %v\n", len(r.PubSubChannels(ctx, "g:*").Val()))
	for i := 0; i < 10; i++ {
		ch := "g:news"
		if i%2 == 0 {
			ch = fmt.Sprintf("g:user:%d", i)
		}
		fmt.Printf("publish %s %v\n", ch, r.Publish(ctx, ch, fmt.Sprintf("go %d", i)).Val())
	}
	receive(10)
	if err := sub.Ping(ctx, "hi"); err != nil {
		fmt.Printf("ping error: %v\n", err)
	}
	receive(1)
	if err := sub.Unsubscribe(ctx, "g:news"); err != nil {
		fmt.Printf("unsubscribe error: %v\n", err)
	}
	receive(1)
	fmt.Printf("publish after %v\n", r.Publish(ctx, "g:news", "nobody").Val())
	fmt.Printf("publish jobs %v\n", r.Publish(ctx, "g:jobs", "still").Val())
	receive(1)
	if err := sub.PUnsubscribe(ctx); err != nil {
		fmt.Printf("punsubscribe error: %v\n", err)
	}
	receive(1)
}
