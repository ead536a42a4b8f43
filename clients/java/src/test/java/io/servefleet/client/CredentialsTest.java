package io.servefleet.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Tokens and TLS files refused before any call, each problem named (no cluster). */
class CredentialsTest {
  @Test
  void tokensThatCanBeSent() {
    assertNull(Credentials.tokenProblem("sf_abc-DEF.123~+/"));
    assertNull(Credentials.tokenProblem("abc=="));
  }

  @Test
  void tokensThatCannotAreNamed() {
    assertEquals("the token is empty", Credentials.tokenProblem(""));
    assertEquals("the token holds U+00E9 at character 4; a token is printable ASCII",
        Credentials.tokenProblem("abc\u00e9"));
    assertEquals("the token holds U+000A at character 4; a token is printable ASCII",
        Credentials.tokenProblem("abc\n"));
    assertTrue(Credentials.tokenProblem("a=b").contains("cannot have"));
    assertTrue(Credentials.tokenProblem("a,b").contains("cannot have"));
    assertEquals("the token is padding only", Credentials.tokenProblem("=="));
    IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
        () -> ControllerClient.builder("127.0.0.1:1").token("bad token"));
    assertTrue(refused.getMessage().startsWith("servefleet: the token holds U+0020"));
  }

  @Test
  void aMissingFileIsNamed(@TempDir Path dir) {
    UncheckedIOException missing = assertThrows(UncheckedIOException.class,
        () -> Credentials.tlsFromDir(dir.toFile(), "admin"));
    assertTrue(missing.getMessage().contains(new File(dir.toFile(), "ca.crt").toString()),
        missing.getMessage());
  }

  @Test
  void aFileThatIsNoCertificateIsNamed(@TempDir Path dir) throws Exception {
    for (String name : new String[] {"ca.crt", "admin.crt", "admin.key"}) {
      Files.writeString(dir.resolve(name), "not PEM\n");
    }
    UncheckedIOException bad = assertThrows(UncheckedIOException.class,
        () -> Credentials.tlsFromDir(dir.toFile(), "admin"));
    assertTrue(bad.getMessage().startsWith("servefleet: cluster CA " + dir.resolve("ca.crt")),
        bad.getMessage());
  }
}
