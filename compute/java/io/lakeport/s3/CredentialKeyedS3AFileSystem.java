package io.lakeport.s3;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ContentSummary;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FilterFileSystem;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.fs.StorageStatistics;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.fs.s3a.AWSCredentialProviderList;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import org.apache.hadoop.util.Progressable;

/**
 * S3A, shared per bucket <em>and credentials</em> rather than per bucket alone.
 *
 * <p>Hadoop caches one file system per scheme, bucket and user, made with the configuration of
 * whoever asked first. A compute unit serves executions whose Iceberg catalogs carry storage
 * credentials that the catalog vended for a limited time; with Hadoop's cache the first
 * credentials for a bucket would be used by the whole JVM forever, so executions would fail
 * once they expire, and two warehouses in one bucket would share one warehouse's credentials.
 *
 * <p>Configured with {@code fs.s3.impl} (and {@code fs.s3a.impl}) plus
 * {@code fs.s3.impl.disable.cache=true}: Hadoop then makes a new instance of this light wrapper
 * for every request, and the wrapper hands it the S3AFileSystem kept for the bucket and the
 * credentials in that request's configuration, making it once.
 *
 * <p>Closing: each table of a run may have credentials of its own in one bucket
 * ({@link VendedCredentialsFileIO}), so a bucket may hold many live sets at once. A set whose
 * stated expiry ({@value #EXPIRES_AT_MS}, written by VendedCredentialsFileIO) passed more than a
 * minute ago has its file system closed when a new one is made; beyond {@value #KEPT_PER_BUCKET}
 * sets in a bucket the oldest is closed (a set without a stated expiry is replaced only when
 * about to expire, so it has expired by then).
 */
public class CredentialKeyedS3AFileSystem extends FilterFileSystem {

  static final int KEPT_PER_BUCKET = 64;
  static final String EXPIRES_AT_MS = "fs.s3a.lakeport.credentials-expire-at-ms";
  static final long CLOSE_AFTER_EXPIRY_MS = 60_000L;

  private static final String[] CREDENTIAL_OPTIONS = {
    "access.key", "secret.key", "session.token", "aws.credentials.provider", "endpoint", "path.style.access",
  };

  private static final Map<String, S3AFileSystem> SHARED = new HashMap<>();
  private static final Map<String, Deque<String>> KEYS_BY_BUCKET = new HashMap<>();
  private static final Map<String, Long> EXPIRES_AT = new HashMap<>();
  private static long created;

  public CredentialKeyedS3AFileSystem() {
    super();
  }

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    fs = shared(name, conf);
    super.initialize(name, conf); // does not initialize `fs` again: it has its configuration
  }

  /** Instances are throwaway wrappers: closing one must not close the shared file system. */
  @Override
  public void close() throws IOException {
  }

  // FilterFileSystem leaves these to FileSystem's generic versions, which either refuse
  // (getScheme, createNonRecursive) or walk the store call by call where S3A has its own.

  @Override
  public String getScheme() {
    return fs.getScheme();
  }

  @Override
  public FSDataOutputStream createNonRecursive(Path path, FsPermission permission, boolean overwrite,
      int bufferSize, short replication, long blockSize, Progressable progress) throws IOException {
    return fs.createNonRecursive(path, permission, overwrite, bufferSize, replication, blockSize, progress);
  }

  @Override
  public boolean exists(Path path) throws IOException {
    return fs.exists(path);
  }

  @Override
  public boolean isDirectory(Path path) throws IOException {
    return fs.isDirectory(path);
  }

  @Override
  public boolean isFile(Path path) throws IOException {
    return fs.isFile(path);
  }

  @Override
  public RemoteIterator<LocatedFileStatus> listFiles(Path path, boolean recursive) throws IOException {
    return fs.listFiles(path, recursive);
  }

  @Override
  public ContentSummary getContentSummary(Path path) throws IOException {
    return fs.getContentSummary(path);
  }

  @Override
  public StorageStatistics getStorageStatistics() {
    return fs.getStorageStatistics();
  }

  @Override
  public String getCanonicalServiceName() {
    return fs.getCanonicalServiceName();
  }

  /** How many S3A file systems are open now (for tests). */
  public static synchronized int openFileSystems() {
    return SHARED.size();
  }

  /** How many S3A file systems were made so far: one per bucket and set of credentials (for tests). */
  public static synchronized long createdFileSystems() {
    return created;
  }

  private static synchronized S3AFileSystem shared(URI name, Configuration conf) throws IOException {
    String bucket = name.getScheme() + "://" + name.getAuthority();
    String host = name.getHost() != null ? name.getHost() : name.getAuthority();
    String key = bucket + "#" + fingerprint(host, conf);
    S3AFileSystem existing = SHARED.get(key);
    if (existing != null) {
      return existing;
    }
    S3AFileSystem fresh = new S3AFileSystem();
    fresh.initialize(name, conf);
    makeCredentials(fresh);
    created++;
    SHARED.put(key, fresh);
    EXPIRES_AT.put(key, conf.getLong(EXPIRES_AT_MS, 0L));
    Deque<String> keys = KEYS_BY_BUCKET.computeIfAbsent(bucket, b -> new ArrayDeque<>());
    keys.addLast(key);
    long closeBefore = System.currentTimeMillis() - CLOSE_AFTER_EXPIRY_MS;
    for (String kept : new ArrayDeque<>(keys)) {
      long expiresAt = EXPIRES_AT.getOrDefault(kept, 0L);
      if (expiresAt > 0 && expiresAt < closeBefore) {
        keys.remove(kept);
        closeShared(kept);
      }
    }
    while (keys.size() > KEPT_PER_BUCKET) {
      closeShared(keys.removeFirst());
    }
    return fresh;
  }

  /**
   * Has the file system's credential providers make their credentials now, under this class's
   * lock, before any thread is handed the file system. Hadoop 3.3.1's session-credentials
   * providers (TemporaryAWSCredentialsProvider: AbstractSessionCredentialsProvider.init) mark
   * themselves initialized before they have made their credentials, so a second thread asking
   * meanwhile gets none and its request fails ("has no credentials"): seen as one of a run's two
   * write tasks failing on the file system made for its table's new credentials. Credentials that
   * cannot be made (keys missing) are left for the file system's first request to report.
   */
  private static void makeCredentials(S3AFileSystem fresh) {
    try (AWSCredentialProviderList credentials = fresh.shareCredentials("made before sharing")) {
      credentials.getCredentials();
    } catch (RuntimeException unusable) {
      // reported by the first request, as without this call
    }
  }

  private static void closeShared(String key) throws IOException {
    EXPIRES_AT.remove(key);
    S3AFileSystem expired = SHARED.remove(key);
    if (expired != null) {
      expired.close();
    }
  }

  /** A digest of the settings that decide how S3A authenticates to this bucket (bucket-specific
   * settings first, as S3A reads them), so secrets are not kept as map keys. */
  private static String fingerprint(String bucket, Configuration conf) {
    try {
      MessageDigest digest = MessageDigest.getInstance("SHA-256");
      for (String option : CREDENTIAL_OPTIONS) {
        String value = conf.get("fs.s3a.bucket." + bucket + "." + option, conf.get("fs.s3a." + option, ""));
        digest.update(option.getBytes(StandardCharsets.UTF_8));
        digest.update((byte) 0);
        digest.update(value.getBytes(StandardCharsets.UTF_8));
        digest.update((byte) 0);
      }
      StringBuilder hex = new StringBuilder();
      for (byte b : digest.digest()) {
        hex.append(String.format("%02x", b));
      }
      return hex.toString();
    } catch (NoSuchAlgorithmException impossible) {
      throw new IllegalStateException(impossible);
    }
  }
}
