# redis-py's PubSub against one server: two clients (a publisher and a
# subscriber); prints every message and reply, to be compared line for line
# between memshift and a plain Redis. Args: host port protocol(2|3).
import sys

import redis

host, port, proto = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pub = redis.Redis(host=host, port=port, protocol=proto)
sub = redis.Redis(host=host, port=port, protocol=proto)
p = sub.pubsub()


def drain(n, timeout=10):
    for _ in range(n):
        print(p.get_message(timeout=timeout))


p.subscribe("news", "jobs")
drain(2)
p.psubscribe("user:*", "n*")
drain(2)
print("numsub", pub.pubsub_numsub("news", "jobs", "none"))
print("numpat", pub.pubsub_numpat())
print("channels", sorted(pub.pubsub_channels()))
print("channels n*", sorted(pub.pubsub_channels("n*")))
for i in range(20):
    channel = "news" if i % 2 else "user:%d" % i
    print("publish", channel, pub.publish(channel, "payload %d" % i))
# news: a message and a pmessage (n*) each; user:N: a pmessage.
drain(30)
print("publish nobody", pub.publish("zzz", "x"))
big = "x" * 100000
print("publish big", pub.publish("jobs", big))
m = p.get_message(timeout=10)
print(m["type"], m["channel"], len(m["data"]))
p.ping("hello")
drain(1)
p.unsubscribe("news")
drain(1)
pub.publish("news", "after unsubscribe: only n* gets it")
pub.publish("jobs", "still subscribed")
drain(2)
print("nothing more", p.get_message(timeout=0.5))
p.punsubscribe()
drain(2)
p.unsubscribe()
drain(1)
print("subscribed", p.subscribed)
print("numsub after", pub.pubsub_numsub("news", "jobs"), pub.pubsub_numpat())
# Subscribe again on the same PubSub (a new subscriber connection).
p.subscribe("again")
drain(1)
print("publish again", pub.publish("again", "back"))
drain(1)
p.close()
print("WORKLOAD DONE")
