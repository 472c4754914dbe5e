// A Curator client for tests/stores/curator.rs: Apache Curator's own InterProcessMutex on one
// lock path, driven line by line over stdin, answering on stdout. Compiled by the test with
// javac against Debian's Curator jars; nothing of it is dlock's.
//
//   java CuratorMutex <connect string> <lock path> [mutex | read | write | semaphore:<N>]
//   (the last: InterProcessMutex, a side of InterProcessReadWriteLock, or one lease at a time
//   of InterProcessSemaphoreV2 with N leases; default mutex)
//   stdin:  try | acquire | release | children | quit
//   stdout: READY, then HELD | BUSY | RELEASED | CHILDREN <name,...> per command
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorMutex {
    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10000, 5000, new RetryOneTime(100));
        client.start();
        if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) {
            System.out.println("NOT CONNECTED");
            return;
        }
        String mode = args.length > 2 ? args[2] : "mutex";
        if (mode.startsWith("semaphore:")) {
            semaphore(client, args[1], Integer.parseInt(mode.substring("semaphore:".length())));
            return;
        }
        InterProcessMutex mutex;
        if (mode.equals("read")) {
            mutex = new InterProcessReadWriteLock(client, args[1]).readLock();
        } else if (mode.equals("write")) {
            mutex = new InterProcessReadWriteLock(client, args[1]).writeLock();
        } else {
            mutex = new InterProcessMutex(client, args[1]);
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("READY");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            switch (line) {
                case "try":
                    System.out.println(mutex.acquire(200, TimeUnit.MILLISECONDS) ? "HELD" : "BUSY");
                    break;
                case "acquire":
                    // Bounded all the same: the test's own bound is shorter.
                    System.out.println(mutex.acquire(30, TimeUnit.SECONDS) ? "HELD" : "BUSY");
                    break;
                case "release":
                    mutex.release();
                    System.out.println("RELEASED");
                    break;
                case "children":
                    List<String> children = client.getChildren().forPath(args[1]);
                    System.out.println("CHILDREN " + String.join(",", children));
                    break;
                default:
                    client.close();
                    return;
            }
            System.out.flush();
        }
        client.close();
    }

    /// The same commands for one lease of a semaphore.
    static void semaphore(CuratorFramework client, String path, int leases) throws Exception {
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, leases);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("READY");
        System.out.flush();
        Lease lease = null;
        String line;
        while ((line = in.readLine()) != null) {
            switch (line) {
                case "try":
                    lease = semaphore.acquire(200, TimeUnit.MILLISECONDS);
                    System.out.println(lease != null ? "HELD" : "BUSY");
                    break;
                case "acquire":
                    lease = semaphore.acquire(30, TimeUnit.SECONDS);
                    System.out.println(lease != null ? "HELD" : "BUSY");
                    break;
                case "release":
                    semaphore.returnLease(lease);
                    lease = null;
                    System.out.println("RELEASED");
                    break;
                default:
                    client.close();
                    return;
            }
            System.out.flush();
        }
        client.close();
    }
}
