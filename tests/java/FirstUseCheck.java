/** Used by tests/test_vended_credentials_file_io.py: many threads making the first request of a
 * file system made for new session credentials at once, as a write's tasks do. For each of SETS
 * credential sets, THREADS threads ask for the credentials together (what S3A does before each
 * request), once through CredentialKeyedS3AFileSystem ("keyed") and once through a plain
 * S3AFileSystem made for the set ("plain"); prints how many of the asks got no credentials. */
import java.net.URI;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FilterFileSystem;
import org.apache.hadoop.fs.s3a.S3AFileSystem;

public class FirstUseCheck {
  static final int SETS = 150;
  static final int THREADS = 8;

  public static void main(String[] args) throws Exception {
    URI bucket = URI.create("s3a://bucket/");
    ExecutorService pool = Executors.newFixedThreadPool(THREADS);
    for (String way : new String[] {"plain", "keyed"}) {
      AtomicInteger failed = new AtomicInteger();
      for (int set = 0; set < SETS; set++) {
        Configuration conf = new Configuration(false);
        conf.set("fs.s3a.impl", "io.lakeport.s3.CredentialKeyedS3AFileSystem");
        conf.set("fs.s3a.impl.disable.cache", "true");
        conf.set("fs.s3a.endpoint", "http://127.0.0.1:9");
        conf.set("fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider");
        conf.set("fs.s3a.access.key", way + "-key-" + set);
        conf.set("fs.s3a.secret.key", "secret-" + set);
        conf.set("fs.s3a.session.token", "token-" + set);
        S3AFileSystem plain = null;
        if (way.equals("plain")) {
          plain = new S3AFileSystem();
          plain.initialize(bucket, conf);
        }
        final S3AFileSystem made = plain;
        CyclicBarrier together = new CyclicBarrier(THREADS);
        CountDownLatch done = new CountDownLatch(THREADS);
        for (int t = 0; t < THREADS; t++) {
          pool.submit(() -> {
            try {
              together.await();
              S3AFileSystem fs = made != null ? made
                  : (S3AFileSystem) ((FilterFileSystem) FileSystem.get(bucket, conf)).getRawFileSystem();
              fs.shareCredentials("check").getCredentials();
            } catch (Exception noCredentials) {
              failed.incrementAndGet();
            } finally {
              done.countDown();
            }
            return null;
          });
        }
        done.await();
      }
      System.out.println(way + " " + failed.get() + " " + (SETS * THREADS));
    }
    pool.shutdownNow();
  }
}
