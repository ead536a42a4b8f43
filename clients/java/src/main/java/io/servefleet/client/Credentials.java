package io.servefleet.client;

import io.grpc.ChannelCredentials;
import io.grpc.InsecureChannelCredentials;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;

/**
 * How a client reaches the controllers: plain text, or the cluster's mutual TLS; and the checks
 * on a bearer token before it is sent.
 */
public final class Credentials {
  private Credentials() {}

  /** Plain text: a cluster started without certificates. */
  public static ChannelCredentials plainText() {
    return InsecureChannelCredentials.create();
  }

  /**
   * The client side of the cluster's mutual TLS, from PEM files: the cluster's CA certificate
   * (the controllers' certificates must chain to it), this client's certificate and its key
   * (PKCS#8, as {@code servefleet certs init} writes it). The server name checked is the
   * address's host ({@code servefleet certs init} names localhost, 127.0.0.1 and ::1, and each
   * {@code --host}).
   *
   * @throws UncheckedIOException naming the file that cannot be read or used
   */
  public static ChannelCredentials tls(File caFile, File certFile, File keyFile) {
    for (File file : new File[] {caFile, certFile, keyFile}) {
      if (!file.canRead()) {
        throw refused(file + ": no such file, or it cannot be read", null);
      }
    }
    certificates("cluster CA " + caFile, caFile);
    certificates("client certificate " + certFile, certFile);
    privateKey(keyFile);
    TlsChannelCredentials.Builder builder = TlsChannelCredentials.newBuilder();
    try {
      builder.trustManager(caFile);
      builder.keyManager(certFile, keyFile);
    } catch (IOException e) {
      throw refused(e.getMessage(), e);
    }
    return builder.build();
  }

  private static UncheckedIOException refused(String message, Throwable cause) {
    return new UncheckedIOException("servefleet: " + message,
        new IOException("servefleet: " + message, cause));
  }

  /** The PEM certificates in {@code file}; at least one, or an error naming what and where. */
  private static void certificates(String what, File file) {
    try (InputStream in = new FileInputStream(file)) {
      if (CertificateFactory.getInstance("X.509").generateCertificates(in).isEmpty()) {
        throw new CertificateException("no PEM certificate in it");
      }
    } catch (IOException | CertificateException e) {
      throw refused(what + ": " + e.getMessage(), e);
    }
  }

  /** A PEM PKCS#8 private key, what gRPC's TLS reads; an error names the file. */
  private static void privateKey(File file) {
    String text;
    try {
      text = Files.readString(file.toPath(), StandardCharsets.US_ASCII);
    } catch (IOException e) {
      throw refused("key " + file + ": " + e, e);
    }
    if (!text.contains("-----BEGIN PRIVATE KEY-----")) {
      throw refused("key " + file + ": no PEM PKCS#8 private key in it (BEGIN PRIVATE KEY);"
          + " convert one with `openssl pkcs8 -topk8 -nocrypt -in OLD -out NEW`", null);
    }
  }

  /**
   * {@link #tls(File, File, File)} of a {@code servefleet certs init} directory: DIR/ca.crt,
   * DIR/ROLE.crt and DIR/ROLE.key (the command line's role is "admin").
   */
  public static ChannelCredentials tlsFromDir(File dir, String role) {
    return tls(new File(dir, "ca.crt"), new File(dir, role + ".crt"),
        new File(dir, role + ".key"));
  }

  /**
   * Why {@code token} cannot be sent as a bearer token (RFC 6750's b64token: letters, digits
   * and -._~+/, then = padding), or null when it can. gRPC would refuse such metadata with a
   * bare INTERNAL error; the controller reads the same rule.
   */
  public static String tokenProblem(String token) {
    if (token == null || token.isEmpty()) {
      return "the token is empty";
    }
    boolean padding = false;
    for (int i = 0; i < token.length(); i++) {
      char c = token.charAt(i);
      if (c <= ' ' || c >= 0x7f) {
        return String.format("the token holds U+%04X at character %d; a token is printable ASCII",
            (int) c, i + 1);
      }
      boolean plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
          || "-._~+/".indexOf(c) >= 0;
      if (c == '=') {
        padding = true;
      } else if (padding || !plain) {
        return "the token holds characters a bearer token cannot have (letters, digits and"
            + " -._~+/ then = padding only)";
      }
    }
    return token.charAt(0) == '=' ? "the token is padding only" : null;
  }
}
