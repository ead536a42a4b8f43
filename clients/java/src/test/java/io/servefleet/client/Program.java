package io.servefleet.client;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** A Java program in a JVM of its own (this one's class path), its output read line by line. */
final class Program implements AutoCloseable {
  private final Process process;
  private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
  private final List<String> seen = new ArrayList<>();

  Program(Map<String, String> env, String mainClass, String... args) throws IOException {
    List<String> command = new ArrayList<>(List.of(
        System.getProperty("java.home") + File.separator + "bin" + File.separator + "java",
        "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"), mainClass));
    command.addAll(List.of(args));
    ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
    builder.environment().putAll(env);
    process = builder.start();
    Thread reader = new Thread(() -> {
      try (BufferedReader in = new BufferedReader(
          new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        for (String line = in.readLine(); line != null; line = in.readLine()) {
          lines.add(line);
        }
      } catch (IOException ignored) {
        // the process ended
      }
    });
    reader.setDaemon(true);
    reader.start();
  }

  /** Reads the output until a line matches {@code pattern} (90 s at most). */
  Matcher until(String pattern) throws InterruptedException {
    Pattern wanted = Pattern.compile(pattern);
    long deadline = System.currentTimeMillis() + 90_000;
    while (System.currentTimeMillis() < deadline) {
      String line = lines.poll(1, TimeUnit.SECONDS);
      if (line == null) {
        assertTrue(process.isAlive(), "the program ended:\n" + String.join("\n", seen));
        continue;
      }
      seen.add(line);
      Matcher m = wanted.matcher(line);
      if (m.find()) {
        return m;
      }
    }
    return fail("no line like " + pattern + " in:\n" + String.join("\n", seen));
  }

  /** Ctrl-C: SIGINT, as a terminal sends it. */
  void interrupt() throws Exception {
    new ProcessBuilder("kill", "-INT", Long.toString(process.pid())).start().waitFor();
  }

  int waitFor() throws InterruptedException {
    assertTrue(process.waitFor(30, TimeUnit.SECONDS), String.join("\n", seen));
    return process.exitValue();
  }

  @Override
  public void close() {
    process.destroyForcibly();
  }
}
