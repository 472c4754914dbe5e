#!/usr/bin/env python3
"""How long a PUBLISH takes to reach a subscriber on the same node and on another node of a
Redis Cluster (the cluster bus carries it there). Explains the 40 ms wake-ups in the scale
curves on a cluster (runtime docs, "How cost grows").

Usage: publish_latency.py SUBSCRIBER_PORT PUBLISHER_PORT [GAP_SECONDS] [COUNT]
against a running local cluster, e.g. three `redis-server --cluster-enabled yes` on ports
17001-17003 joined with `redis-cli --cluster create ... --cluster-replicas 0`. Both client
sockets set TCP_NODELAY, so only the link between the nodes can hold a message back.
"""
import socket
import sys
import time


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def main():
    sub_port, pub_port = int(sys.argv[1]), int(sys.argv[2])
    gap = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    sub, pub = connect(sub_port), connect(pub_port)
    sub.sendall(command("SUBSCRIBE", "publish-latency"))
    sub.recv(65536)
    took = []
    for i in range(count):
        marker = "m%d" % i
        started = time.perf_counter()
        pub.sendall(command("PUBLISH", "publish-latency", marker))
        seen = b""
        while marker.encode() not in seen:
            seen += sub.recv(65536)
        took.append((time.perf_counter() - started) * 1000)
        pub.recv(65536)
        time.sleep(gap)
    took.sort()
    slow = sum(1 for t in took if t > 20)
    print(
        "subscriber on %d, publisher on %d: p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
        "%d of %d over 20 ms"
        % (sub_port, pub_port, took[count // 2], took[count * 99 // 100], took[-1], slow, count)
    )


if __name__ == "__main__":
    main()
