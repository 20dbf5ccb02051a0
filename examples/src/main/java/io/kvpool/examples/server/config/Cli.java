package io.kvpool.examples.server.config;

import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.ISetter;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * A command line of the examples, on picocli: its options in headed sections, from which picocli both parses the
 * arguments and writes the help, so that the two cannot drift. Parsing only splits the arguments into options and
 * their values ({@code --name value} or {@code --name=value}), in the order given; the caller converts and checks each
 * value and owns the messages for bad values. Picocli refuses what no option takes, in its own words: an unknown
 * option ("Unknown option: '--x'"), a missing value ("Missing required parameter for option '--port' (N)"), a stray
 * argument ("Unmatched argument at index 0: 'x'"). {@code -h} and {@code --help} ask for {@link #usage()}.
 * Immutable once built; {@link #parse} may run on several threads.
 */
public final class Cli {

    /** The width of the help text. */
    static final int WIDTH = 120;

    /**
     * One option.
     *
     * @param name        its long name, e.g. {@code --port}
     * @param label       its value in the help, e.g. {@code N}; {@code null} for a switch, which takes no value
     * @param description its help text, defaults included
     */
    public record Flag(String name, String label, String description) {

        /** @throws IllegalArgumentException unless {@code name} starts with {@code --} */
        public Flag {
            if (!name.startsWith("--")) {
                throw new IllegalArgumentException("an option starts with --: " + name);
            }
            Objects.requireNonNull(description, "description");
        }

        /** @return a switch, an option without a value */
        public static Flag toggle(String name, String description) {
            return new Flag(name, null, description);
        }

        /** @return whether it takes no value */
        public boolean isSwitch() {
            return label == null;
        }
    }

    /**
     * One option as given.
     *
     * @param name  the option's name
     * @param value its value; {@code null} for a switch
     */
    public record Given(String name, String value) {
    }

    /**
     * What {@link #parse} found.
     *
     * @param given the options given, in order (one repeated is in twice)
     * @param help  whether {@code -h} or {@code --help} was given
     */
    public record Parsed(List<Given> given, boolean help) {
    }

    private record Section(String heading, List<Flag> flags) {
    }

    private final String synopsis;
    private final String description;
    private final List<Section> sections;

    /**
     * @param synopsis    the first line of the help, e.g. {@code usage: KvServerMain serve [options]}
     * @param description what the command does (lines of text), printed below the synopsis; may be empty
     */
    public Cli(String synopsis, String description) {
        this(synopsis, description, List.of());
    }

    private Cli(String synopsis, String description, List<Section> sections) {
        this.synopsis = Objects.requireNonNull(synopsis, "synopsis");
        this.description = Objects.requireNonNull(description, "description");
        this.sections = List.copyOf(sections);
    }

    /**
     * @param heading the line above the section's options in the help, e.g. {@code options (defaults in brackets):}
     * @return this command line with one more section of options
     * @throws IllegalArgumentException for an option name already taken
     */
    public Cli section(String heading, List<Flag> flags) {
        final Set<String> names = new HashSet<>(names());
        names.add("--help");
        for (Flag f : flags) {
            if (!names.add(f.name())) {
                throw new IllegalArgumentException("option " + f.name() + " is in this command line twice");
            }
        }
        final List<Section> s = new ArrayList<>(sections);
        s.add(new Section(heading, List.copyOf(flags)));
        return new Cli(synopsis, description, s);
    }

    /** @return every option, in the order of the help ({@code --help} not included) */
    public List<Flag> flags() {
        return sections.stream().flatMap(s -> s.flags().stream()).toList();
    }

    /** @return the names of {@link #flags()} */
    public Set<String> names() {
        final Set<String> out = new HashSet<>();
        flags().forEach(f -> out.add(f.name()));
        return out;
    }

    /**
     * Splits the arguments into the options given.
     *
     * @throws IllegalArgumentException with picocli's message for anything none of the options takes
     */
    public Parsed parse(String... args) {
        final List<Given> given = new ArrayList<>();
        final CommandLine cl = commandLine(given);
        final CommandLine.ParseResult r;
        try {
            r = cl.parseArgs(args);
        } catch (CommandLine.ParameterException e) {
            throw new IllegalArgumentException(e.getMessage(), e);
        }
        return new Parsed(List.copyOf(given), r.isUsageHelpRequested());
    }

    /** @return the help: the synopsis, the description, then each section's heading and options, as picocli lays them out */
    public String usage() {
        return commandLine(new ArrayList<>()).getUsageMessage(CommandLine.Help.Ansi.OFF);
    }

    /** The picocli command, its options' values going to {@code sink} as they are matched. */
    private CommandLine commandLine(List<Given> sink) {
        final CommandSpec spec = CommandSpec.create();
        spec.usageMessage().sortOptions(false).width(WIDTH).longOptionsMaxWidth(32).synopsisHeading("")
            .customSynopsis(escape(synopsis)).descriptionHeading("").optionListHeading("")
            .description(description.lines().map(Cli::escape).toArray(String[]::new));
        spec.parser().overwrittenOptionsAllowed(true).expandAtFiles(false);
        spec.addOption(OptionSpec.builder("-h", "--help").usageHelp(true).description("this help").build());
        for (Flag f : flags()) {
            final OptionSpec.Builder o = OptionSpec.builder(f.name()).description(escape(f.description())).setter(new ISetter() {
                @Override
                public <T> T set(T value) {
                    // picocli first resets every option to null, then sets each as it is matched, in order
                    if (value instanceof Boolean on) {
                        if (on) {
                            sink.add(new Given(f.name(), null));
                        }
                    } else if (value != null) {
                        sink.add(new Given(f.name(), value.toString()));
                    }
                    return null;
                }
            });
            spec.addOption(f.isSwitch() ? o.type(boolean.class).arity("0").build()
                : o.type(String.class).arity("1").paramLabel(f.label()).build());
        }
        final CommandLine cl = new CommandLine(spec);
        cl.getHelpSectionMap().put(CommandLine.Model.UsageMessageSpec.SECTION_KEY_OPTION_LIST, help -> {
            final List<OptionSpec> all = spec.options();
            final StringBuilder out = new StringBuilder();
            boolean first = true;
            for (Section s : sections) {
                out.append(s.heading()).append(System.lineSeparator());
                final CommandLine.Help.Layout layout = help.createDefaultLayout(all, List.of(), help.colorScheme());
                final List<OptionSpec> options = new ArrayList<>();
                for (Flag f : s.flags()) {
                    options.add(spec.findOption(f.name()));
                }
                if (first) {
                    options.add(spec.findOption("--help"));
                    first = false;
                }
                layout.addOptions(options, LABEL);
                out.append(layout);
            }
            return out.toString();
        });
        return cl;
    }

    /** Shows an option's value as {@code --port N}, the way the docs write it; picocli accepts {@code --port=N} too. */
    private static final CommandLine.Help.IParamLabelRenderer LABEL = new CommandLine.Help.IParamLabelRenderer() {
        @Override
        public CommandLine.Help.Ansi.Text renderParameterLabel(CommandLine.Model.ArgSpec arg, CommandLine.Help.Ansi ansi,
                                                               List<CommandLine.Help.Ansi.IStyle> styles) {
            return ansi.new Text(arg.arity().max() == 0 ? "" : separator() + arg.paramLabel());
        }

        @Override
        public String separator() {
            return " ";
        }
    };

    /** picocli formats help text with {@link String#format}: a literal % is %%. */
    private static String escape(String s) {
        return s.replace("%", "%%");
    }
}
