package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Every class, method and field the extension's own classes use from Pulsar, BookKeeper and the libraries the
 * broker ships resolves on this test's classpath exactly as the compiled classes name it (owner, name,
 * descriptor). The default build runs it on Pulsar 4.0.8's classes; {@code -Ppulsar-5.0} (make broker-extension,
 * with a Java 21+) runs the same compiled jar's tests on Pulsar 5.0's: a method a line dropped or changed
 * (Pulsar 5.0 has no {@code TopicName.isV2()}) fails here, not in a broker the first time that path runs.
 *
 * <p>Members are resolved through method handles, which load only the types of the member looked up. Linking a
 * large owner (the broker's {@code PulsarService}) can need classes this test's classpath leaves out (servlet and
 * web-socket types its own code uses, not the member's): a member whose lookup fails for such a class is looked
 * for, by name and descriptor, in the owner's class file and its supertypes' ({@code javap}) instead.
 */
class LinkageTest {
    private static final Pattern REFERENCE = Pattern.compile(
            "= (Methodref|InterfaceMethodref|Fieldref|Class)\\s+\\S+\\s+// (\\S+)");

    @Test
    void everyReferenceOutsideTheJdkResolves() throws Exception {
        Path classes = Path.of(LedgerDrops.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        List<Path> files;
        try (Stream<Path> walk = Files.walk(classes)) {
            files = walk.filter(p -> p.toString().endsWith(".class")).toList();
        }
        assertTrue(files.size() > 10, "the extension's classes, not found in " + classes);
        Set<String> references = new TreeSet<>(references(files));
        List<String> unresolved = new ArrayList<>();
        for (String r : references) {
            String error = resolve(r);
            if (error != null) {
                unresolved.add(r + ": " + error);
            }
        }
        assertTrue(references.size() > 100, "too few references read: " + references.size());
        assertEquals(List.of(), unresolved, "references of the extension that this Pulsar's classes do not have");
    }

    private static List<String> references(List<Path> classFiles) throws Exception {
        List<String> command = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "javap").toString(), "-v"));
        classFiles.forEach(f -> command.add(f.toString()));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), out);
        List<String> refs = new ArrayList<>();
        Matcher m = REFERENCE.matcher(out);
        while (m.find()) {
            String target = m.group(2).replace("\"", "");
            if (target.startsWith("[") || target.startsWith("java/") || target.startsWith("javax/")
                    || target.startsWith("org/ledgerdeletion/")) {
                continue;
            }
            refs.add(m.group(1) + " " + target);
        }
        return refs;
    }

    /** Null if {@code reference} (kind, owner[.name:descriptor]) resolves, else why not. */
    private static String resolve(String reference) {
        String kind = reference.substring(0, reference.indexOf(' '));
        String target = reference.substring(kind.length() + 1);
        int dot = target.indexOf('.');
        String owner = (dot < 0 ? target : target.substring(0, dot)).replace('/', '.');
        ClassLoader loader = LinkageTest.class.getClassLoader();
        Class<?> type;
        try {
            type = Class.forName(owner, false, loader);
        } catch (Throwable e) {
            return e.toString();
        }
        if (kind.equals("Class")) {
            return null;
        }
        String name = target.substring(dot + 1, target.indexOf(':'));
        String descriptor = target.substring(target.indexOf(':') + 1);
        try {
            MethodHandles.Lookup lookup = MethodHandles.privateLookupIn(type, MethodHandles.lookup());
            if (kind.equals("Fieldref")) {
                Class<?> fieldType = MethodType.fromMethodDescriptorString("()" + descriptor, loader).returnType();
                return firstResolving(() -> lookup.findGetter(type, name, fieldType),
                        () -> lookup.findStaticGetter(type, name, fieldType));
            }
            MethodType mt = MethodType.fromMethodDescriptorString(descriptor, loader);
            String error = name.equals("<init>") ? firstResolving(() -> lookup.findConstructor(type, mt))
                    : firstResolving(() -> lookup.findVirtual(type, name, mt), () -> lookup.findStatic(type, name, mt));
            if (error != null && error.contains("NoClassDefFoundError") && declared(owner, name, descriptor, loader)) {
                return null;
            }
            return error;
        } catch (Throwable e) {
            return e.toString();
        }
    }

    /** Whether {@code owner}'s class file, or a supertype's, declares method {@code name} with {@code descriptor}. */
    private static boolean declared(String owner, String name, String descriptor, ClassLoader loader)
            throws Exception {
        var url = loader.getResource(owner.replace('.', '/') + ".class");
        if (url == null) {
            return false;
        }
        Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "javap").toString(), "-p",
                "-s", url.toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            return false;
        }
        Matcher member = Pattern.compile("[ .$]" + Pattern.quote(name) + "\\([^\n]*\\n\\s*descriptor: "
                + Pattern.quote(descriptor) + "\\n").matcher(out);
        if (member.find()) {
            return true;
        }
        Matcher header = Pattern.compile("(?:class|interface) \\S+(?: extends ([^{]+?))?(?: implements ([^{]+?))? \\{")
                .matcher(out);
        if (!header.find()) {
            return false;
        }
        List<String> supertypes = new ArrayList<>();
        for (int g = 1; g <= 2; g++) {
            if (header.group(g) != null) {
                for (String t : header.group(g).split(",")) {
                    supertypes.add(t.strip().replaceAll("<.*", ""));
                }
            }
        }
        for (String t : supertypes) {
            if (!t.startsWith("java.") && declared(t, name, descriptor, loader)) {
                return true;
            }
        }
        return false;
    }

    private interface Lookup {
        Object find() throws ReflectiveOperationException;
    }

    private static String firstResolving(Lookup... ways) {
        List<String> errors = new ArrayList<>();
        for (Lookup way : ways) {
            try {
                way.find();
                return null;
            } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
                errors.add(e + (e.getCause() == null ? "" : " (" + e.getCause() + ")"));
            }
        }
        return String.join("; ", errors);
    }
}
