//! Long file: the generator's phrase banks are data, kept beside the code that uses them.
//!
//! A synthetic conversational-memory set: multi-session conversations between a user and an
//! assistant, dated sessions, and questions whose evidence is one or more turns. Synthesised
//! deterministically (a xorshift PRNG seeded by blake3 of the seed) from hand-written banks:
//! fact types (pets, family, job, city, car, hobbies, allergies, trips, books, …), each with
//! several ways to mention the fact in passing inside a longer turn, several ways to ask for
//! it that avoid the mention's words (hypernyms: "pet" for the dog's breed, "instrument" for
//! cello), distractor turns on the same topic with other values (a friend's dog, a trip that
//! was only planned), and filler turns (assistant answers, chit-chat). Question kinds:
//!
//! - `single`: one evidence turn;
//! - `update`: a fact that changes later ("we moved to Denver"); evidence is the latest turn;
//! - `multi`: two facts that must be combined (a relative's job in one session, where that
//!   relative moved in another);
//! - `temporal`: needs the session dates ("what was I reading last May?", asked after).
//!
//! Nothing here was taken from a public benchmark; the held-out conversational set the
//! project is checked on is never read.

pub use crate::convmem_types::{Conversation, Dataset, Question, Session, Turn};

struct Rng(u64);

impl Rng {
    fn new(seed: &str) -> Rng {
        let h = blake3::hash(seed.as_bytes());
        Rng(u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or([7; 8])) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// A fact type: values, ways to mention a value (`{v}`), ways to ask for it, and ways a
/// distractor mentions another value (someone else's, or only considered).
struct Fact {
    key: &'static str,
    values: &'static [&'static str],
    say: &'static [&'static str],
    ask: &'static [&'static str],
    other: &'static [&'static str],
    /// Changes over time (used for `update` questions).
    changes: bool,
    /// Ways to say it changed (`{v}` the new value).
    change: &'static [&'static str],
}

const FACTS: &[Fact] = &[
    Fact {
        key: "dog",
        values: &["Biscuit", "Mango", "Pepper", "Waffles", "Juno", "Ziggy", "Olive", "Rocket"],
        say: &[
            "ugh, long day. had to take {v} to the vet before work because he kept scratching his ear",
            "{v} chewed through another charging cable this morning, I swear that puppy eats electronics",
            "we finally got {v} to stop pulling on the leash during walks, took weeks of treats",
            "it was raining so {v} refused to go out, typical golden retriever drama",
        ],
        ask: &["What is my dog called?", "What's the name of the pup I have?", "Remind me what my pet is named?"],
        other: &[
            "my neighbour's dog {v} barked all night again",
            "my friend just adopted a beagle named {v}, so cute",
        ],
        changes: false,
        change: &[],
    },
    Fact {
        key: "city",
        values: &["Denver", "Lisbon", "Austin", "Leeds", "Montreal", "Porto", "Seattle", "Utrecht"],
        say: &[
            "the weather here in {v} has been all over the place this week",
            "I still get lost on the tram lines in {v}, and I've lived here two years",
            "rent in {v} went up again, not sure how long we can keep this apartment",
        ],
        ask: &["Which city do I live in?", "Where am I based these days?", "What town is home for me right now?"],
        other: &[
            "my cousin keeps telling me to visit {v} in the spring",
            "there's a conference in {v} I might skip this year",
        ],
        changes: true,
        change: &[
            "big news: the move is done, we're officially living in {v} now",
            "first week after relocating to {v}, boxes everywhere",
        ],
    },
    Fact {
        key: "employer",
        values: &["Helix Labs", "Northwind", "Bluefin Analytics", "Orchard Health", "Kestrel Games", "Tidewater Bank"],
        say: &[
            "standup at {v} got moved to 8am again, which is brutal",
            "my manager at {v} wants the quarterly report by Friday",
            "the coffee machine at {v} broke, productivity is down 50%",
        ],
        ask: &["Who do I work for?", "Which company employs me at the moment?", "Where is my job?"],
        other: &[
            "a recruiter from {v} messaged me on LinkedIn but I ignored it",
            "my sister interviewed at {v} last year",
        ],
        changes: true,
        change: &[
            "signed the offer! starting at {v} next month",
            "first day at {v} went well, the team seems nice",
        ],
    },
    Fact {
        key: "instrument",
        values: &["cello", "ukulele", "saxophone", "drums", "violin", "banjo"],
        say: &[
            "practiced the {v} for an hour tonight, my fingers hurt",
            "my {v} teacher says I rush the tempo on every piece",
            "thinking of buying a better {v}, the rental one sounds thin",
        ],
        ask: &["What instrument am I learning?", "Which instrument do I play?", "What am I practicing music on?"],
        other: &[
            "my roommate plays the {v} at 11pm, send help",
            "saw a street performer with a {v} today, amazing",
        ],
        changes: false,
        change: &[],
    },
    Fact {
        key: "allergy",
        values: &["peanuts", "shellfish", "cats", "pollen", "penicillin", "sesame"],
        say: &[
            "had to send the curry back, it had {v} and I can't risk it",
            "my doctor confirmed the allergy to {v}, so I carry the pen now",
            "reading every label twice because of my {v} thing",
        ],
        ask: &["What am I allergic to?", "Which allergy do I have?", "What should I avoid for medical reasons?"],
        other: &[
            "my coworker is allergic to {v}, we changed the office snacks",
        ],
        changes: false,
        change: &[],
    },
    Fact {
        key: "car",
        values: &["Subaru Outback", "Honda Civic", "Tesla Model 3", "VW Golf", "Toyota RAV4", "Mazda 3"],
        say: &[
            "the {v} needs new tires before winter",
            "got a parking ticket with the {v} downtown, ugh",
            "road trip in the {v} was smooth, great mileage",
        ],
        ask: &["What do I drive?", "Which vehicle do I own?", "What's my current car?"],
        other: &[
            "my dad is thinking of getting a {v}",
            "test drove a {v} for fun but didn't buy it",
        ],
        changes: true,
        change: &[
            "traded in the old car, picked up a {v} yesterday",
            "finally sold my old ride, the new {v} is in the driveway",
        ],
    },
    Fact {
        key: "book",
        values: &["Dune", "The Overstory", "Project Hail Mary", "Middlemarch", "Piranesi", "The Remains of the Day"],
        say: &[
            "stayed up way too late reading {v}, couldn't put it down",
            "halfway through {v} and the middle part drags a bit",
            "my book club picked {v} for this month",
        ],
        ask: &["What novel was I reading?", "Which book had me hooked?", "What was I reading at the time?"],
        other: &[
            "someone recommended {v} but it's not my thing",
        ],
        changes: false,
        change: &[],
    },
    Fact {
        key: "language",
        values: &["Japanese", "Portuguese", "German", "Korean", "Italian", "Dutch"],
        say: &[
            "my {v} lesson was tough today, the grammar is wild",
            "I'm on a 40-day streak in my {v} app",
            "practiced ordering food in {v} with my tutor",
        ],
        ask: &["What language am I studying?", "Which foreign language have I been learning?", "What tongue am I picking up?"],
        other: &["my niece is taking {v} at school"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "sport",
        values: &["bouldering", "rowing", "tennis", "swimming", "trail running", "volleyball"],
        say: &[
            "sore everywhere after {v} yesterday",
            "signed up for a beginner {v} class on Tuesdays",
            "my {v} coach says my form is getting better",
        ],
        ask: &["What exercise do I do regularly?", "Which sport have I taken up?", "How do I keep fit?"],
        other: &["my brother is obsessed with {v} lately"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "plant",
        values: &["fiddle-leaf fig", "monstera", "basil", "orchid", "snake plant", "lemon tree"],
        say: &[
            "my {v} is dropping leaves again, too much water maybe",
            "repotted the {v} this weekend, dirt everywhere",
        ],
        ask: &["What houseplant am I struggling with?", "Which plant do I keep at home?"],
        other: &["saw a huge {v} at the garden centre"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "show",
        values: &["Severance", "The Bear", "Succession", "Slow Horses", "Shogun", "Bluey"],
        say: &[
            "binged three episodes of {v} last night",
            "no spoilers please, I'm only on season one of {v}",
        ],
        ask: &["What series was I watching?", "Which TV show was I hooked on?"],
        other: &["everyone at work keeps talking about {v}"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "diet",
        values: &["vegetarian", "vegan", "pescatarian", "gluten-free", "keto"],
        say: &[
            "been {v} for six months now and feel great",
            "finding {v} options when eating out is still hard",
        ],
        ask: &["What kind of diet do I follow?", "What are my eating habits?"],
        other: &["my partner tried going {v} but gave up"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "birthday",
        values: &["March 3rd", "July 19th", "October 2nd", "December 28th", "May 11th"],
        say: &[
            "my birthday is {v}, so I'm planning a small dinner",
            "can't believe I turn 35 on {v}",
        ],
        ask: &["When is my birthday?", "What date do I celebrate turning a year older?"],
        other: &["my best friend's birthday is {v}"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "project",
        values: &["a budgeting app", "a birdhouse", "a home weather station", "a family cookbook", "a podcast"],
        say: &[
            "spent the evening on my side project, {v}",
            "made progress on {v}, the hardest part is done",
        ],
        ask: &["What am I building in my spare time?", "What's my hobby project?"],
        other: &["a coworker showed me {v} he made"],
        changes: false,
        change: &[],
    },
    Fact {
        key: "doctor",
        values: &["Dr. Okafor", "Dr. Lindqvist", "Dr. Ramos", "Dr. Chen", "Dr. Moreau"],
        say: &[
            "checkup with {v} went fine, blood pressure is normal",
            "{v} wants me back in three months for the knee",
        ],
        ask: &["Who is my physician?", "Which doctor am I seeing?"],
        other: &["my mom switched to {v}"],
        changes: false,
        change: &[],
    },
];

/// Relatives for `multi` questions: (relation, names, jobs, hypernym of the job).
const RELATIVES: &[&str] = &[
    "sister",
    "brother",
    "cousin",
    "aunt",
    "best friend",
    "roommate",
];
const NAMES: &[&str] = &[
    "Ana", "Priya", "Tomasz", "Keiko", "Marcus", "Ines", "Dev", "Hana", "Luca", "Noor",
];
const JOBS: &[(&str, &str)] = &[
    ("nurse", "works in a hospital"),
    ("pilot", "flies planes"),
    ("chef", "cooks for a living"),
    ("architect", "designs buildings"),
    ("teacher", "works at a school"),
    ("vet", "treats animals"),
];
const PLACES: &[&str] = &[
    "Porto",
    "Nairobi",
    "Oslo",
    "Melbourne",
    "Quito",
    "Busan",
    "Krakow",
];

/// Events for `temporal` questions: (mention, question phrase).
const EVENTS: &[(&str, &str)] = &[
    (
        "finally went to the pottery workshop, made a lopsided bowl",
        "try a craft class",
    ),
    (
        "ran my first 10k this morning, legs are jelly",
        "do a long race",
    ),
    (
        "we hosted a dinner party, twelve people in our tiny flat",
        "have people over for a meal",
    ),
    (
        "flew back from the trip to Iceland, still jet-lagged",
        "return from a trip abroad",
    ),
    (
        "got the new laptop set up, migrating everything took hours",
        "set up a new computer",
    ),
    (
        "went to the concert at the arena, my ears are still ringing",
        "see live music",
    ),
    (
        "painted the bedroom a dark green, it looks amazing",
        "redecorate a room",
    ),
    (
        "adopted a kitten from the shelter today",
        "bring home a new animal",
    ),
];

const FILLER_USER: &[&str] = &[
    "can you suggest a quick dinner with rice and whatever veggies I have?",
    "how do I get red wine out of a carpet?",
    "any tips for staying focused in the afternoon?",
    "what's a good way to structure a weekly budget?",
    "I need a polite way to decline a meeting invite",
    "explain compound interest like I'm five",
    "what should I pack for a weekend of hiking?",
    "help me write a birthday message for a coworker",
    "is it worth learning to touch type at my age?",
    "what's the difference between baking soda and baking powder?",
    "recommend a podcast about history",
    "how long should I steep green tea?",
    "ok thanks, that helps",
    "haha fair enough",
    "what are some stretches for lower back pain?",
    "how do I make my sourdough starter more active?",
];

const FILLER_ASSISTANT: &[&str] = &[
    "Sure! A simple stir-fry works well: cook the rice, sauté the vegetables with garlic and soy sauce, and combine.",
    "Blot the stain, then apply a mix of dish soap and white vinegar; avoid rubbing, which spreads it.",
    "Try short focused blocks of 25 minutes with breaks, and keep your phone in another room.",
    "A common approach is 50/30/20: needs, wants, and savings. Track a month first to see where money goes.",
    "You could say: thank you for the invite, unfortunately I can't make it, please share the notes.",
    "If you save a coin and the bank adds a little each year, next year you earn on the coin and the little bit too.",
    "Layers, rain jacket, water, snacks, a map, sunscreen, and broken-in boots.",
    "It's never too late; twenty minutes a day for a few weeks makes a big difference.",
    "Baking powder already contains an acid; baking soda needs an acid in the recipe to react.",
    "Green tea is best steeped for two to three minutes at around 80°C.",
    "Gentle knee-to-chest stretches, cat-cow, and child's pose can help; see a doctor if it persists.",
    "Feed it more often at a warmer temperature, and use a bit of whole-grain flour.",
    "Glad that helped! Anything else on your mind?",
    "That sounds like a lot. Do you want to talk through it?",
];

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

use memory::time::{days_from_civil, rfc3339};

/// A day number (days since 1970-01-01) as `YYYY-MM-DD`.
fn date(days: i64) -> String {
    rfc3339(days * 86_400_000)[..10].to_string()
}

/// (year, month) of a day number.
fn year_month(days: i64) -> (i64, u32) {
    let d = date(days);
    (d[..4].parse().unwrap_or(1970), d[5..7].parse().unwrap_or(1))
}

/// A turn to place: (session index, text, speaker, tag for evidence lookup).
struct Planned {
    session: usize,
    text: String,
    tag: Option<String>,
}

/// Generates `conversations` conversations and their questions.
pub fn generate(seed: &str, conversations: usize) -> Dataset {
    let mut ds = Dataset::default();
    for ci in 0..conversations {
        let mut r = Rng::new(&format!("{seed}/{ci}"));
        let cid = format!("c{ci:02}");
        let n_sessions = 8 + r.below(8);
        let start = days_from_civil(2024, 1 + r.below(12) as u32, 1 + r.below(27) as u32);
        let mut day = start;
        let mut dates = Vec::new();
        for _ in 0..n_sessions {
            day += 14 + r.below(40) as i64;
            dates.push(day);
        }
        // Every question of a conversation is asked after its last session.
        let ask_at = dates[n_sessions - 1] + 1 + r.below(20) as i64;
        // "in May" when that May is the last one before the question, else "in May 2024".
        let month_phrase = |d: i64| {
            let (y, m) = year_month(d);
            if ask_at - d < 300 {
                MONTHS[m as usize - 1].to_string()
            } else {
                format!("{} {y}", MONTHS[m as usize - 1])
            }
        };
        let mut planned: Vec<Planned> = Vec::new();
        // (kind, question, evidence tags, earliest question day)
        let mut qs: Vec<(String, String, Vec<String>, i64)> = Vec::new();
        // Facts.
        for (fi, f) in FACTS.iter().enumerate() {
            let v = f.values[r.below(f.values.len())];
            let s = r.below(n_sessions.saturating_sub(2));
            let tag = format!("f{fi}");
            planned.push(Planned {
                session: s,
                text: r.pick(f.say).replace("{v}", v),
                tag: Some(tag.clone()),
            });
            // A distractor in another session.
            let other = loop {
                let o = f.values[r.below(f.values.len())];
                if o != v {
                    break o;
                }
            };
            planned.push(Planned {
                session: r.below(n_sessions),
                text: r.pick(f.other).replace("{v}", other),
                tag: None,
            });
            if f.changes && r.below(2) == 0 && s + 1 < n_sessions {
                let nv = loop {
                    let o = f.values[r.below(f.values.len())];
                    if o != v && o != other {
                        break o;
                    }
                };
                let later = s + 1 + r.below(n_sessions - s - 1);
                let ntag = format!("f{fi}u");
                planned.push(Planned {
                    session: later,
                    text: r.pick(f.change).replace("{v}", nv),
                    tag: Some(ntag.clone()),
                });
                qs.push((
                    "update".into(),
                    r.pick(f.ask).to_string(),
                    vec![ntag],
                    dates[later],
                ));
            } else {
                qs.push((
                    "single".into(),
                    r.pick(f.ask).to_string(),
                    vec![tag.clone()],
                    dates[s],
                ));
            }
            // Temporal: "what was I … in <Month>?".
            if matches!(f.key, "book" | "show" | "instrument" | "sport" | "language") {
                let what = match f.key {
                    "book" => "What was I reading",
                    "show" => "Which show was I watching",
                    "instrument" => "What instrument was I practicing",
                    "sport" => "What sport had I started",
                    _ => "Which language was I studying",
                };
                qs.push((
                    "temporal".into(),
                    format!("{what} in {}?", month_phrase(dates[s])),
                    vec![tag.clone()],
                    dates[s],
                ));
            }
        }
        // Relatives: a job in one session, a move in another (multi-hop).
        for k in 0..2 + r.below(3) {
            let rel = RELATIVES[r.below(RELATIVES.len())];
            let name = NAMES[(ci + k * 3 + r.below(NAMES.len())) % NAMES.len()];
            let (job, job_desc) = JOBS[r.below(JOBS.len())];
            let place = PLACES[r.below(PLACES.len())];
            let s1 = r.below(n_sessions - 1);
            let s2 = s1 + 1 + r.below(n_sessions - s1 - 1);
            let t1 = format!("m{k}a");
            let t2 = format!("m{k}b");
            let job_say = [
                format!("my {rel} {name} just finished training as a {job}, so proud"),
                format!("{name}, my {rel}, got a job as a {job} at last"),
                format!(
                    "talked to my {rel} {name} for an hour, being a {job} is exhausting apparently"
                ),
            ];
            let move_say = [
                format!("{name} is moving to {place} next month, I'll miss her"),
                format!("helped {name} pack, the flight to {place} is on Sunday"),
                format!("{name} sent photos from her new apartment in {place}"),
            ];
            planned.push(Planned {
                session: s1,
                text: job_say[r.below(3)].clone(),
                tag: Some(t1.clone()),
            });
            planned.push(Planned {
                session: s2,
                text: move_say[r.below(3)].clone(),
                tag: Some(t2.clone()),
            });
            let q = [
                format!("Where does my {rel} who {job_desc} live now?"),
                format!("Which city did my {rel}, the one who {job_desc}, move to?"),
            ];
            qs.push((
                "multi".into(),
                q[r.below(2)].clone(),
                vec![t1, t2],
                dates[s2],
            ));
        }
        // Events: temporal order questions.
        let mut ev: Vec<(usize, usize)> = Vec::new();
        for (ei, _) in EVENTS.iter().enumerate() {
            if r.below(3) > 0 {
                let s = r.below(n_sessions);
                ev.push((ei, s));
                planned.push(Planned {
                    session: s,
                    text: EVENTS[ei].0.to_string(),
                    tag: Some(format!("e{ei}")),
                });
            }
        }
        for w in ev.windows(2) {
            let ((a, sa), (b, sb)) = (w[0], w[1]);
            if sa == sb {
                continue;
            }
            qs.push((
                "temporal".into(),
                format!(
                    "Which happened first: when I {} or when I {}?",
                    EVENTS[a].1, EVENTS[b].1
                ),
                vec![format!("e{a}"), format!("e{b}")],
                dates[sa.max(sb)],
            ));
            qs.push((
                "temporal".into(),
                format!("What did I get up to in {}?", month_phrase(dates[sa])),
                vec![format!("e{a}")],
                dates[sa],
            ));
        }
        // Sessions: filler, then the planned turns placed at random positions.
        let mut sessions: Vec<Session> = Vec::new();
        let mut tag_turn: std::collections::HashMap<String, String> = Default::default();
        for (si, &d) in dates.iter().enumerate() {
            let n = 10 + r.below(16);
            let mut texts: Vec<(String, String, Option<String>)> = Vec::new();
            for i in 0..n {
                if i % 2 == 0 {
                    texts.push(("user".into(), r.pick(FILLER_USER).to_string(), None));
                } else {
                    texts.push((
                        "assistant".into(),
                        r.pick(FILLER_ASSISTANT).to_string(),
                        None,
                    ));
                }
            }
            for p in planned.iter().filter(|p| p.session == si) {
                let pos = r.below(texts.len() + 1);
                texts.insert(pos, ("user".into(), p.text.clone(), p.tag.clone()));
                if pos < texts.len() {
                    texts.insert(
                        pos + 1,
                        (
                            "assistant".into(),
                            r.pick(FILLER_ASSISTANT).to_string(),
                            None,
                        ),
                    );
                }
            }
            let sid = format!("{cid}-s{si:02}");
            let turns = texts
                .into_iter()
                .enumerate()
                .map(|(ti, (speaker, text, tag))| {
                    let id = format!("{sid}-t{ti:02}");
                    if let Some(t) = tag {
                        tag_turn.insert(t, id.clone());
                    }
                    Turn { id, speaker, text }
                })
                .collect();
            sessions.push(Session {
                id: sid,
                date: date(d),
                turns,
            });
        }
        for (qi, (kind, text, tags, _earliest)) in qs.into_iter().enumerate() {
            let evidence: Vec<String> = tags
                .iter()
                .filter_map(|t| tag_turn.get(t).cloned())
                .collect();
            if evidence.len() != tags.len() {
                continue;
            }
            ds.questions.push(Question {
                id: format!("{cid}-q{qi:02}"),
                conversation: cid.clone(),
                text,
                date: date(ask_at),
                kind,
                evidence,
            });
        }
        ds.conversations.push(Conversation { id: cid, sessions });
    }
    ds
}

/// Counts per kind, turns, sessions, evidence size and lexical overlap.
pub fn stats(d: &Dataset) -> String {
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for q in &d.questions {
        *kinds.entry(q.kind.as_str()).or_default() += 1;
    }
    let sessions: usize = d.conversations.iter().map(|c| c.sessions.len()).sum();
    let turns: usize = d
        .conversations
        .iter()
        .flat_map(|c| &c.sessions)
        .map(|s| s.turns.len())
        .sum();
    let text: std::collections::HashMap<&str, &str> = d
        .conversations
        .iter()
        .flat_map(|c| &c.sessions)
        .flat_map(|s| &s.turns)
        .map(|t| (t.id.as_str(), t.text.as_str()))
        .collect();
    const STOP: &[&str] = &[
        "the", "a", "an", "i", "my", "me", "do", "did", "what", "which", "who", "where", "when",
        "is", "am", "are", "was", "of", "to", "in", "at", "for", "on", "have", "had", "now", "how",
        "s", "the", "one", "that",
    ];
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .map(|w| w.to_lowercase())
            .filter(|w| !w.is_empty() && !STOP.contains(&w.as_str()))
            .collect()
    };
    let mut overlaps = Vec::new();
    for q in &d.questions {
        let qw = words(&q.text);
        let ev: std::collections::HashSet<String> = q
            .evidence
            .iter()
            .flat_map(|e| words(text.get(e.as_str()).copied().unwrap_or("")))
            .collect();
        if qw.is_empty() {
            continue;
        }
        overlaps.push(qw.iter().filter(|w| ev.contains(*w)).count() as f64 / qw.len() as f64);
    }
    let n = overlaps.len().max(1) as f64;
    let mean = overlaps.iter().sum::<f64>() / n;
    let zero = overlaps.iter().filter(|&&x| x == 0.0).count() as f64 / n;
    let half = overlaps.iter().filter(|&&x| x < 0.5).count() as f64 / n;
    format!(
        "{} conversations, {sessions} sessions, {turns} turns, {} questions ({kinds:?}); question words found in their evidence: mean {mean:.3}, none {zero:.3}, under half {half:.3}",
        d.conversations.len(),
        d.questions.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_consistent() {
        let a = generate("t", 40);
        let b = generate("t", 40);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert!(a.questions.len() >= 1000, "{}", a.questions.len());
        let mut ids = std::collections::HashSet::new();
        let mut where_: std::collections::HashMap<&str, (&str, &str)> = Default::default();
        for c in &a.conversations {
            let mut prev = String::new();
            for s in &c.sessions {
                assert!(s.date > prev, "dates increase");
                prev = s.date.clone();
                for t in &s.turns {
                    assert!(ids.insert(t.id.clone()), "unique turn ids");
                    where_.insert(&t.id, (&c.id, &s.date));
                }
            }
        }
        for q in &a.questions {
            assert!(!q.evidence.is_empty());
            for e in &q.evidence {
                let (c, d) = where_[e.as_str()];
                assert_eq!(c, q.conversation);
                assert!(q.date.as_str() >= d, "{} asked before its evidence", q.id);
            }
        }
    }
}
