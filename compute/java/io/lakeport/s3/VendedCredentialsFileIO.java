package io.lakeport.s3;

import java.io.IOException;
import java.io.Serializable;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.io.StorageCredential;
import org.apache.iceberg.io.SupportsStorageCredentials;
import org.apache.iceberg.rest.credentials.Credential;
import org.apache.iceberg.rest.responses.LoadCredentialsResponseParser;

/**
 * Hadoop's S3A file IO for one table, with the storage credentials the catalog vended for that
 * table, renewed before they expire.
 *
 * <p>Iceberg's REST catalog (1.10) makes a FileIO for each table it loads or creates, from the
 * catalog's properties merged with the table's {@code config} and given the table's
 * {@code storage-credentials} ({@code RESTSessionCatalog.tableFileIO}, {@code CatalogUtil.loadFileIO}:
 * {@code setCredentials} before {@code initialize}). Lakekeeper (v0.13.3) vends credentials that
 * reach that one table's location only ({@code S3Profile::get_sts_policy_string},
 * crates/lakekeeper/src/service/storage/s3.rs), so each table's files must be reached with its own
 * keys: this IO's Hadoop configuration carries them as S3A settings, and
 * {@link CredentialKeyedS3AFileSystem} gives each set of keys a file system of its own.
 *
 * <p>Renewal: Lakekeeper puts {@code s3.session-token-expires-at-ms} and
 * {@code client.refresh-credentials-endpoint} (its {@code /v1/{prefix}/namespaces/{ns}/tables/{t}/credentials},
 * the REST spec's loadCredentials) in the table's storage credential (same file,
 * {@code generate_table_config}; crates/lakekeeper/src/request_metadata.rs). When less than
 * {@code lakeport.credentials.renew-before-ms} (default 5 minutes) remain, the next file this IO
 * opens first asks that endpoint, with the run's bearer token (the catalog's {@code token}), for
 * fresh keys. The IO is serialized into Spark's tasks with its keys, endpoint and token, so an
 * executor renews the same way. Iceberg's own renewal ({@code VendedCredentialsProvider}) exists
 * only for S3FileIO (AWS SDK v2), which cannot run here.
 *
 * <p>One set per IO: the credential whose prefix is longest (Lakekeeper sends one, for the
 * table's location); without any, the table's {@code s3.*} properties, else the catalog's S3A
 * settings unchanged.
 */
public class VendedCredentialsFileIO extends HadoopFileIO implements SupportsStorageCredentials {

  static final String ACCESS_KEY_ID = "s3.access-key-id";
  static final String SECRET_ACCESS_KEY = "s3.secret-access-key";
  static final String SESSION_TOKEN = "s3.session-token";
  static final String EXPIRES_AT_MS = "s3.session-token-expires-at-ms";
  static final String ENDPOINT = "s3.endpoint";
  static final String PATH_STYLE = "s3.path-style-access";
  static final String REFRESH_ENDPOINT = "client.refresh-credentials-endpoint";
  static final String RENEW_BEFORE_MS = "lakeport.credentials.renew-before-ms";
  static final long DEFAULT_RENEW_BEFORE_MS = 5 * 60 * 1000L;
  // A failed renewal is tried again after this long, not by every file the IO opens meanwhile.
  static final long RETRY_AFTER_MS = 5_000L;
  static final Duration RENEWAL_TIMEOUT = Duration.ofSeconds(15);

  private static final AtomicLong RENEWALS = new AtomicLong();

  private List<StorageCredential> storageCredentials = Collections.emptyList();
  private volatile Keys keys;
  private String credentialPrefix;
  private String refreshUri;
  private String bearerToken;
  private long renewBeforeMs = DEFAULT_RENEW_BEFORE_MS;
  private transient volatile KeyedConf keyed;
  private transient long lastAttemptMs;

  public VendedCredentialsFileIO() {
    super();
  }

  @Override
  public void setCredentials(List<StorageCredential> credentials) {
    this.storageCredentials = new ArrayList<>(credentials);
  }

  @Override
  public List<StorageCredential> credentials() {
    return Collections.unmodifiableList(storageCredentials);
  }

  @Override
  public void initialize(Map<String, String> properties) {
    super.initialize(properties);
    Map<String, String> vended = new HashMap<>(properties);
    StorageCredential chosen = null;
    for (StorageCredential credential : storageCredentials) {
      if (chosen == null || credential.prefix().length() > chosen.prefix().length()) {
        chosen = credential;
      }
    }
    if (chosen != null) {
      vended.putAll(chosen.config());
      credentialPrefix = chosen.prefix();
    }
    keys = Keys.of(vended);
    bearerToken = properties.get("token");
    refreshUri = resolve(properties.get("uri"), vended.get(REFRESH_ENDPOINT));
    String renewBefore = properties.get(RENEW_BEFORE_MS);
    if (renewBefore != null) {
      renewBeforeMs = Long.parseLong(renewBefore);
    }
  }

  /** The catalog's Hadoop configuration with this table's keys, renewed first when they are about to expire. */
  @Override
  public Configuration getConf() {
    Configuration base = super.getConf();
    Keys current = freshKeys();
    if (current == null) {
      return base;
    }
    KeyedConf made = keyed;
    if (made != null && made.keys == current && made.base == base) {
      return made.conf;
    }
    Configuration conf = new Configuration(base);
    current.applyTo(conf);
    keyed = new KeyedConf(base, current, conf);
    return conf;
  }

  /** How many renewals succeeded in this JVM (for tests). */
  public static long renewals() {
    return RENEWALS.get();
  }

  /** The access key id this IO's files are reached with now (for tests). */
  public String accessKeyId() {
    Keys current = keys;
    return current == null ? null : current.accessKey;
  }

  private Keys freshKeys() {
    Keys current = keys;
    if (current == null || refreshUri == null || current.expiresAtMs <= 0
        || current.expiresAtMs - System.currentTimeMillis() > renewBeforeMs) {
      return current;
    }
    synchronized (this) {
      long now = System.currentTimeMillis();
      current = keys;
      if (current.expiresAtMs - now > renewBeforeMs || now - lastAttemptMs < RETRY_AFTER_MS) {
        return current;
      }
      lastAttemptMs = now;
      try {
        keys = renewed(current);
        RENEWALS.incrementAndGet();
      } catch (IOException | RuntimeException error) {
        // The keys in hand may still work until they expire; a request after that fails with
        // S3's own error, which names the expired token.
        System.err.println("lakeport: could not renew the vended storage credentials from "
            + refreshUri + ": " + error);
      } catch (InterruptedException interrupted) {
        Thread.currentThread().interrupt();
      }
      return keys;
    }
  }

  private Keys renewed(Keys current) throws IOException, InterruptedException {
    HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(refreshUri)).timeout(RENEWAL_TIMEOUT).GET()
        .header("Accept", "application/json");
    if (bearerToken != null && !bearerToken.isEmpty()) {
      request.header("Authorization", "Bearer " + bearerToken);
    }
    HttpResponse<String> answer = HttpClient.newBuilder().connectTimeout(RENEWAL_TIMEOUT).build()
        .send(request.build(), HttpResponse.BodyHandlers.ofString());
    if (answer.statusCode() != 200) {
      throw new IOException("the catalog answered " + answer.statusCode() + ": " + abbreviated(answer.body()));
    }
    Credential best = null;
    for (Credential credential : LoadCredentialsResponseParser.fromJson(answer.body()).credentials()) {
      boolean matches = credentialPrefix == null || credentialPrefix.startsWith(credential.prefix());
      if (matches && (best == null || credential.prefix().length() > best.prefix().length())) {
        best = credential;
      }
    }
    if (best == null) {
      throw new IOException("the catalog vended no credentials for " + credentialPrefix);
    }
    Map<String, String> merged = new HashMap<>(current.asProperties());
    merged.putAll(best.config());
    Keys fresh = Keys.of(merged);
    if (fresh == null) {
      throw new IOException("the catalog's credentials for " + best.prefix() + " have no access key");
    }
    String nextEndpoint = resolve(refreshUri, best.config().get(REFRESH_ENDPOINT));
    if (nextEndpoint != null) {
      refreshUri = nextEndpoint;
    }
    return fresh;
  }

  /** `endpoint` as an absolute URI: as given when it is one, else resolved against the catalog's `uri`. */
  static String resolve(String catalogUri, String endpoint) {
    if (endpoint == null || endpoint.isEmpty()) {
      return null;
    }
    if (endpoint.startsWith("http://") || endpoint.startsWith("https://") || catalogUri == null) {
      return endpoint;
    }
    String base = catalogUri.endsWith("/") ? catalogUri : catalogUri + "/";
    return base + (endpoint.startsWith("/") ? endpoint.substring(1) : endpoint);
  }

  private static String abbreviated(String text) {
    return text == null ? "" : text.length() > 300 ? text.substring(0, 300) + "…" : text;
  }

  /** A Hadoop configuration made for one set of keys on one base configuration. */
  private static final class KeyedConf {
    final Configuration base;
    final Keys keys;
    final Configuration conf;

    KeyedConf(Configuration base, Keys keys, Configuration conf) {
      this.base = base;
      this.keys = keys;
      this.conf = conf;
    }
  }

  /** One set of vended S3 keys and where they reach S3. */
  static final class Keys implements Serializable {
    private static final long serialVersionUID = 1L;

    final String accessKey;
    final String secretKey;
    final String sessionToken;
    final String endpoint;
    final String pathStyle;
    final long expiresAtMs;

    private Keys(String accessKey, String secretKey, String sessionToken, String endpoint, String pathStyle,
        long expiresAtMs) {
      this.accessKey = accessKey;
      this.secretKey = secretKey;
      this.sessionToken = sessionToken;
      this.endpoint = endpoint;
      this.pathStyle = pathStyle;
      this.expiresAtMs = expiresAtMs;
    }

    /** The keys in Iceberg's `s3.*` properties, or null without an access key and secret. */
    static Keys of(Map<String, String> properties) {
      String accessKey = properties.get(ACCESS_KEY_ID);
      String secretKey = properties.get(SECRET_ACCESS_KEY);
      if (accessKey == null || accessKey.isEmpty() || secretKey == null || secretKey.isEmpty()) {
        return null;
      }
      String expires = properties.get(EXPIRES_AT_MS);
      return new Keys(accessKey, secretKey, properties.get(SESSION_TOKEN), properties.get(ENDPOINT),
          properties.get(PATH_STYLE), expires == null || expires.isEmpty() ? 0L : Long.parseLong(expires.trim()));
    }

    Map<String, String> asProperties() {
      Map<String, String> properties = new HashMap<>();
      properties.put(ACCESS_KEY_ID, accessKey);
      properties.put(SECRET_ACCESS_KEY, secretKey);
      if (sessionToken != null) {
        properties.put(SESSION_TOKEN, sessionToken);
      }
      if (endpoint != null) {
        properties.put(ENDPOINT, endpoint);
      }
      if (pathStyle != null) {
        properties.put(PATH_STYLE, pathStyle);
      }
      return properties;
    }

    /** S3A's settings for these keys, as compute/spark_session.py `_s3a_settings` writes them. */
    void applyTo(Configuration conf) {
      conf.set("fs.s3a.access.key", accessKey);
      conf.set("fs.s3a.secret.key", secretKey);
      if (sessionToken != null && !sessionToken.isEmpty()) {
        conf.set("fs.s3a.session.token", sessionToken);
        conf.set("fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider");
      } else {
        conf.unset("fs.s3a.session.token");
        conf.set("fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider");
      }
      if (endpoint != null && !endpoint.isEmpty()) {
        conf.set("fs.s3a.endpoint", endpoint);
        conf.set("fs.s3a.connection.ssl.enabled", String.valueOf(endpoint.startsWith("https://")));
      }
      if (pathStyle != null && !pathStyle.isEmpty()) {
        conf.set("fs.s3a.path.style.access", String.valueOf(Boolean.parseBoolean(pathStyle)));
      }
      // When CredentialKeyedS3AFileSystem may close the file system of these keys.
      conf.setLong(CredentialKeyedS3AFileSystem.EXPIRES_AT_MS, expiresAtMs);
    }
  }
}
