/** Used by tests/test_vended_credentials_file_io.py: a table's FileIO as the driver makes it, then
 * as a task gets it (Java-serialized), printing the S3A keys each would use. */
import java.io.*;
import java.util.*;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.io.StorageCredential;
import io.lakeport.s3.VendedCredentialsFileIO;

public class RenewalCheck {
  public static void main(String[] args) throws Exception {
    String uri = args[0];
    long expiresAt = Long.parseLong(args[1]);
    Map<String, String> creds = new HashMap<>();
    creds.put("s3.access-key-id", "FIRST");
    creds.put("s3.secret-access-key", "first-secret");
    creds.put("s3.session-token", "first-token");
    creds.put("s3.endpoint", "http://127.0.0.1:9");
    creds.put("s3.session-token-expires-at-ms", Long.toString(expiresAt));
    creds.put("client.refresh-credentials-endpoint", uri + "/v1/wh/namespaces/ns/tables/t/credentials");
    VendedCredentialsFileIO io = new VendedCredentialsFileIO();
    io.setConf(new Configuration(false));
    io.setCredentials(List.of(StorageCredential.create("s3://bucket/ns/t", creds)));
    Map<String, String> props = new HashMap<>();
    props.put("uri", uri);
    props.put("token", "the-runs-token");
    io.initialize(props);
    if (args[2].equals("driver")) {
      Configuration driver = io.getConf();
      System.out.println("driver " + driver.get("fs.s3a.access.key") + " "
          + driver.get("fs.s3a.lakeport.credentials-expire-at-ms") + " " + VendedCredentialsFileIO.renewals());
    }
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) { out.writeObject(io); }
    VendedCredentialsFileIO task;
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      task = (VendedCredentialsFileIO) in.readObject();
    }
    Configuration conf = task.getConf();
    System.out.println("task " + conf.get("fs.s3a.access.key") + " " + conf.get("fs.s3a.session.token") + " " + conf.get("fs.s3a.aws.credentials.provider") + " " + VendedCredentialsFileIO.renewals());
  }
}
