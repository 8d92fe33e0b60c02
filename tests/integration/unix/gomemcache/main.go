// gomemcache over memshift's unix socket: gomemcache takes a server
// containing a '/' as a unix socket path. Prints "GOMEMCACHE DONE" when
// every check passed.
package main

import (
	"fmt"
	"os"

	"github.com/bradfitz/gomemcache/memcache"
)

func check(ok bool, what string) {
	if !ok {
		fmt.Println("FAIL:", what)
		os.Exit(1)
	}
	fmt.Println("ok:", what)
}

func main() {
	mc := memcache.New(os.Args[1])
	err := mc.Set(&memcache.Item{Key: "go:k", Value: []byte("v"), Flags: 7})
	check(err == nil, fmt.Sprint("set: ", err))
	it, err := mc.Get("go:k")
	check(err == nil && string(it.Value) == "v" && it.Flags == 7, fmt.Sprint("get: ", err))
	_, err = mc.Get("go:missing")
	check(err == memcache.ErrCacheMiss, fmt.Sprint("miss: ", err))
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("go:many:%d", i)
		check(mc.Set(&memcache.Item{Key: key, Value: []byte(key)}) == nil, "set "+key)
	}
	keys := []string{"go:missing"}
	for i := 0; i < 20; i++ {
		keys = append(keys, fmt.Sprintf("go:many:%d", i))
	}
	got, err := mc.GetMulti(keys)
	check(err == nil && len(got) == 20, fmt.Sprint("get multi: ", err, len(got)))
	it, err = mc.Get("go:k")
	check(err == nil, "gets")
	it.Value = []byte("w")
	check(mc.CompareAndSwap(it) == nil, "cas")
	check(mc.CompareAndSwap(it) == memcache.ErrCASConflict, "stale cas")
	check(mc.Set(&memcache.Item{Key: "go:n", Value: []byte("10")}) == nil, "set counter")
	n, err := mc.Increment("go:n", 5)
	check(err == nil && n == 15, fmt.Sprint("incr: ", err, n))
	check(mc.Delete("go:k") == nil, "delete")
	check(mc.Delete("go:k") == memcache.ErrCacheMiss, "delete missing")
	fmt.Println("GOMEMCACHE DONE")
}
