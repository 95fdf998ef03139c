//! Long file: the generator's hand-written banks (facts, paraphrases, filler) are data, kept next to the code that uses them.
//!
//! Synthetic multi-session conversational-memory benchmark. Everything is synthesised
//! deterministically from a seed: a small splitmix64 PRNG is seeded from `blake3(seed, conversation
//! index)`, and draws from hand-written banks (no network, no LLM, no downloaded data):
//!
//! - `FACTS`: ~30 fact types about the user (pets, family, job, car, hobbies, allergies, ...),
//!   each with a value bank, 5 statement templates (the fact mentioned in passing inside a
//!   natural turn, wrapped in chatty prefixes/suffixes), 5 paraphrased question templates
//!   (hypernyms, other verbs) and distractor templates (someone else's value, or the assistant
//!   talking about the topic in general).
//! - `MULTI`, `TEMPORAL`, `UPDATE`: templates for facts that need 2-3 turns combined (an entity
//!   introduced in one session and named again later), session dates (before/after, weeks
//!   between, "last May", months ago) or the latest of several values (moved city, new job).
//! - `FILLER`: topic chit-chat (cooking, travel, work, fitness, books, tech help, ...) and
//!   assistant answers that make up most turns.
//!
//! A conversation has 8-15 dated sessions over ~6-18 months, 10-30 turns each, alternating
//! `user`/`assistant`; every turn is one memory. Questions are asked after the last session;
//! `evidence` lists the turn ids needed to answer.

pub use crate::convmem_types::{Conversation, Dataset, Question, Session, Turn};

// ---------------------------------------------------------------------------------------------
// PRNG and dates.

struct Rng(u64);

impl Rng {
    fn new(seed: &str, salt: &str) -> Rng {
        let h = blake3::hash(format!("{seed}\u{0}{salt}").as_bytes());
        let mut b = [0u8; 8];
        b.copy_from_slice(&h.as_bytes()[..8]);
        Rng(u64::from_le_bytes(b))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// Inclusive range.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i + 1);
            xs.swap(i, j);
        }
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn fmt_date(z: i64) -> String {
    let (y, m, d) = civil(z);
    format!("{y:04}-{m:02}-{d:02}")
}

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

// ---------------------------------------------------------------------------------------------
// Banks: a tiny line format. `== key` opens a section; `f: text` appends `text` to field `f`;
// `v:` lines hold `|`-separated values. An `o:`/`d:` text starting with `A:` is said by the
// assistant.

struct Sec {
    key: String,
    fields: Vec<(String, String)>,
}

impl Sec {
    fn all(&self, f: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k == f)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn vals(&self, f: &str) -> Vec<&str> {
        self.all(f).iter().flat_map(|l| l.split('|')).collect()
    }
}

fn parse(src: &str) -> Vec<Sec> {
    let mut out: Vec<Sec> = Vec::new();
    for line in src.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(k) = line.strip_prefix("== ") {
            out.push(Sec {
                key: k.to_string(),
                fields: Vec::new(),
            });
        } else if let (Some((f, t)), Some(sec)) = (line.split_once(": "), out.last_mut()) {
            sec.fields.push((f.to_string(), t.to_string()));
        }
    }
    out
}

fn find<'a>(secs: &'a [Sec], key: &str) -> &'a Sec {
    secs.iter().find(|s| s.key == key).expect("bank section")
}

fn fill(t: &str, vars: &[(&str, &str)]) -> String {
    let mut s = t.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

const FACTS: &str = r#"
== dog
v: Biscuit|Pepper|Mochi|Juniper|Waffles|Rocket|Maple|Ziggy|Olive|Nacho
s: ugh, long day, and I still had to walk {v} in the rain before my first meeting. He does not care about weather at all.
s: {v} chewed through another sock this morning so that was a fun start to the day.
s: I'm typing one-handed because {v} has decided my lap is his bed now, all thirty pounds of him.
s: took {v} to the park for the first time and he just sat by the bench the whole hour, total introvert.
s: my neighbour offered to mind {v} while I'm away, which is a relief because kennels around here are so pricey.
q: What's my pet called?|Remind me, what name does my pup answer to?|What did I name the animal I live with?|What do I call the furry guy I take out every morning?|Can you remind me what my four-legged companion is named?
o: my coworker {n} just got a puppy named {v}, so now every meeting starts with photos.
o: A:Most dogs settle down with one short walk before work and a longer one in the evening; puzzle feeders help too.
== cat
v: Clementine|Socks|Miso|Tofu|Luna|Gizmo|Pumpkin|Sardine|Noodle|Figaro
s: {v} knocked my coffee off the desk during a call today and just stared at me like it was my fault.
s: had to take {v} to get her claws trimmed, she screamed the entire car ride like I was kidnapping her.
s: the new scratching post was a waste of money, {v} still prefers the arm of the couch.
s: I can't get up, {v} is asleep on my chest and those are the rules.
s: {v} has started yelling at 5am for breakfast, any tips that don't involve giving in?
q: What's the name of my feline?|What is my kitty called again?|What's the name of the little predator who rules my apartment?|Remind me what I call my whiskered roommate?|What name does my purring companion go by?
o: my sister's cat {v} apparently learned to open the fridge, which is terrifying.
o: A:Cats often wake their owners early for food; an automatic feeder set for 6am usually breaks the habit within a couple of weeks.
== manager
v: Priya|Marcus|Hannah|Tobias|Ingrid|Rafael|Yuki|Desmond|Leila|Gareth
s: ugh, {v} moved our standup to 8am again, so I'm already exhausted before lunch.
s: had my one-on-one with {v} today and got told my report was the clearest one this quarter, which felt nice.
s: {v} wants the budget slides by Friday, which means my weekend is basically gone.
s: my boss {v} is out on leave for two weeks so I'm covering the team meetings, wish me luck.
s: {v} keeps scheduling check-ins over lunch and I'm starting to take it personally.
q: Who do I report to at work?|What's my supervisor's name?|Who is in charge of my group at the office?|What's the name of the person who manages me?|Who's my line manager?
o: my friend {n} says her manager {v} is even worse, cancels every single one-on-one.
o: my partner's boss {v} sent an email at 11pm on a Saturday, which is insane.
== employer
v: Northwind Logistics|Bluepeak Analytics|Harbor & Finch|Sundial Health|Orbital Foods|Kestrel Labs|Granite Insurance|Lumen Textiles|Pinecone Media|Riverbend Bank
s: our team at {v} is doing a hackathon next week and I have zero ideas.
s: {v} finally put free snacks in the office, it only took three years of complaining.
s: IT at {v} forced a laptop update on me mid-presentation today. Classic.
s: there's an all-hands at {v} tomorrow and rumour is they're announcing a reorg.
s: my badge didn't work at the {v} front desk this morning, had to wait twenty minutes for security.
q: Which company do I work for?|Who employs me?|What's the name of the firm that pays my salary?|Which organisation is my employer?|What business am I on the payroll of?
o: my cousin {n} just got an offer from {v}, they apparently pay really well.
o: {n} from my running club used to work at {v} and says the culture is intense.
== profession
v: data analyst|pediatric nurse|structural engineer|chemistry teacher|UX designer|paralegal|sous chef|pharmacist|town planner|physiotherapist
s: honestly being a {v} is about 80% emails and 20% actual work some days.
s: when people at parties ask what I do and I say {v} they always have the same follow-up question.
s: ten years as a {v} and I still get nervous before the quarterly reviews.
s: I've been a {v} for a while now and I'm wondering if I should specialise.
s: my mom still doesn't quite get what a {v} does, she tells her friends I "work with computers".
q: What do I do for a living?|What's my occupation?|What line of work am I in?|What career did I end up in?|What's my profession, remind me?
o: my friend {n} is a {v} and swears it's the most stressful job in the world.
o: A:Plenty of people switch careers mid-way; a {v}, for example, often moves into management after a few years.
== hometown
v: Duluth|Savannah|Galway|Adelaide|Lyon|Tucson|Bergen|Halifax|Cork|Valparaiso
s: I grew up in {v}, so this humidity is nothing compared to summers back home.
s: visiting my parents back in {v} next month, the town hasn't changed at all since I was small.
s: every time I smell pine I'm back in {v} as a kid, riding my bike to the lake.
s: people always assume I'm a city person but I'm a {v} kid through and through.
s: found my old school yearbook from {v} while unpacking, my haircut was a crime.
q: Which town am I originally from?|Where was I raised?|What place do I call my hometown?|Where did I live as a child?|Where are my roots?
o: my partner is from {v} and keeps insisting it's the best small town in the world.
o: {n} at work grew up in {v} and says winters there are brutal.
== sister
v: Ana|Clara|Mei|Sofia|Nadia|Greta|Imani|Rosa|Elif|Tamsin
s: my sister {v} called for an hour tonight about her wedding plans, I love her but wow.
s: {v}, my little sister, borrowed my car again and returned it with an empty tank.
s: my older sister {v} is coming to stay this weekend so I need to clean the guest room.
s: it's my sister {v}'s birthday soon and I have no idea what to get her.
s: the group chat with my sister {v} is just memes at 2am, she never sleeps.
q: What's my sibling's name?|What is my sis called?|Who is my female sibling?|Remind me of the name of my parents' daughter, the one who isn't me?|What do I call the girl I grew up with as family?
o: my friend {n} has a sister called {v} who is apparently an amazing baker.
o: my coworker's sister {v} just opened a bakery downtown.
== partner
v: Jonah|Dev|Elena|Sam|Mateo|Aisha|Noor|Theo|Lena|Kofi
s: {v} and I had our first real argument about whose turn it is to do the dishes, very grown up of us.
s: my partner {v} surprised me with tickets to a comedy show tonight.
s: {v} has taken over the kitchen this week because I've been working late, bless them.
s: date night with {v} tomorrow and I still haven't booked anywhere.
s: {v} wants to repaint the bedroom green and I'm not sure I can live in a forest.
q: Who am I in a relationship with?|What's my significant other's name?|Who's the person I'm seeing?|What is my other half called?|Who's my boyfriend or girlfriend?
o: my friend {n} just got engaged to someone called {v}, it happened so fast.
o: my sister's fiance {v} is so quiet, I still can't read him.
== hobby
v: pottery|bouldering|birdwatching|woodworking|salsa dancing|watercolor painting|fly fishing|knitting|stargazing|calligraphy
s: spent the whole Saturday on {v}, I think I've finally found something that makes my brain go quiet.
s: I signed up for a beginner {v} course on Thursdays, first class was humbling.
s: my hands are sore from {v} again, worth it though.
s: honestly {v} has become my whole personality lately, sorry in advance.
s: bought way too much gear for {v} this month, please tell me to stop.
q: What pastime have I gotten into?|Which leisure activity have I picked up recently?|What do I do for fun these days?|What's the new thing I'm doing in my spare time?|Which pursuit did I take up to relax?
o: {n} keeps trying to get me into {v} but I just don't see the appeal.
o: A:{v} is a popular way to unwind; community centres often run cheap taster sessions.
== instrument
v: cello|ukulele|trumpet|bass guitar|violin|banjo|saxophone|drum kit|harmonica|piano
s: practised the {v} for an hour tonight and the neighbours have not complained yet.
s: I've been taking {v} lessons for a month and I can almost play a full song.
s: finally restrung my {v} and it sounds so much better.
s: my {v} teacher says I rush the tempo whenever I get excited.
s: carried my {v} across town in the rain for rehearsal, never again.
q: What instrument am I learning to play?|Which musical instrument do I practise?|What do I make music on?|What kind of instrument do I study?|Which instrument is mine?
o: {n} plays the {v} in a jazz band and invited me to their gig.
o: A:If your neighbours are sensitive, the {v} is one of the louder instruments to start on; practice mutes help.
== allergy
v: peanuts|shellfish|sesame|kiwi|tree nuts|eggs|mustard|strawberries|soy|celery
s: had to send back a salad tonight because it had {v} in it, my throat was already itching.
s: reminder to self to always carry my epipen, my allergy to {v} is not a joke.
s: the waiter swore the dish was free of {v} and yet here I am with hives.
s: filling out the new clinic form and under allergies I wrote {v}, as always.
s: I'm the annoying friend who asks about {v} at every restaurant, but after last time I have to.
q: What am I allergic to?|Which food do I have to avoid for medical reasons?|What ingredient gives me a bad reaction?|What should a restaurant know about my dietary restriction?|Which food makes me sick if I eat it?
o: my nephew is allergic to {v}, so birthday parties are a whole operation.
o: A:Allergies to {v} are fairly common; many restaurants now flag them on menus.
== car
v: Subaru Outback|Honda Civic|Toyota Prius|Mazda 3|VW Golf|Ford Ranger|Kia Niro|Volvo XC40|Hyundai Ioniq|Mini Cooper
s: my {v} made a grinding noise all the way to work this morning, it's probably nothing, right?
s: took the {v} through the car wash and it looks brand new, small victories.
s: someone dinged my {v} in the grocery store parking lot and didn't leave a note.
s: the {v} is due for its service and I keep putting it off.
s: road trip in the {v} this weekend, the trunk fits way more than it looks.
q: What do I drive?|Which vehicle do I own?|What make and model is my ride?|What kind of automobile do I have?|What am I driving around these days?
o: {n} just bought a {v} and keeps sending me pictures of it.
o: A:The {v} is known for being reliable; a grinding noise is usually the brakes, though.
== workout
v: spin class|CrossFit|yoga|swimming laps|Pilates|kickboxing|rowing|barre|trail running|weightlifting
s: {v} at 6:30 this morning nearly killed me, but I feel amazing now.
s: I've done {v} three times a week for a month and I can finally feel a difference.
s: skipped {v} today and I already regret it.
s: the instructor at {v} yelled my name in front of everyone, motivating or humiliating, not sure.
s: new gym routine: {v} Monday, Wednesday, Friday, no excuses.
q: How do I exercise most weeks?|What's my main form of working out?|What kind of fitness regime do I stick to?|Which training do I do to stay in shape?|What sort of physical activity is my go-to?
o: {n} is trying to get me to join her {v} but I'm scared.
o: A:{v} is a good option for building endurance; two or three sessions a week is plenty to start.
== language
v: Japanese|Portuguese|Korean|Italian|Dutch|Greek|Turkish|Polish|Swahili|Mandarin
s: my {v} lesson today was brutal, the verb conjugations are destroying me.
s: I'm 120 days into my {v} streak on the app, and I can almost order food now.
s: watched a {v} movie without subtitles and understood maybe a third of it.
s: my tutor says my {v} pronunciation is getting better, small wins.
s: trying to label everything in my kitchen in {v}, it's a mess of sticky notes.
q: Which foreign tongue am I studying?|What language am I trying to learn?|Which language is on my study list?|What second language am I working on?|Which language am I picking up?
o: {n} is fluent in {v} and keeps offering to practise with me.
o: A:{v} has a reputation for being tricky for English speakers, but consistent daily practice helps a lot.
== podcast
v: Hard Fork|The Daily|Radiolab|99% Invisible|Freakonomics Radio|Serial|Hidden Brain|Song Exploder|Reply All|Planet Money
s: {v} had a great episode this week, I listened to it twice on my commute.
s: I'm caught up on {v} and now my walks are silent and sad.
s: I've been listening to {v} while cooking, it makes chopping onions less miserable.
s: did you know {v} did a whole episode on that? I'm obsessed.
s: {v} is my go-to for long drives now.
q: Which podcast am I hooked on?|What audio series do I follow?|What do I put in my ears on long walks?|Which programme am I always tuning in to?|What's the show I stream in my earbuds?
o: {n} keeps recommending {v} but I can never get past the intro.
o: A:If you like narrative audio, {v} is a common recommendation.
== cuisine
v: Thai|Ethiopian|Peruvian|Georgian|Lebanese|Vietnamese|Sichuan|Mexican|Greek|Malaysian
s: honestly I could eat {v} food every day, nothing comforts me more.
s: found a tiny {v} place near the station and I've been three times this week.
s: when I'm sad, {v} takeaway is the answer, no discussion.
s: we always end up at the {v} spot on Fridays because I refuse to go anywhere else.
s: my birthday dinner has to be {v} again this year, it's tradition.
q: What's my favourite type of cuisine?|Which kind of food do I crave the most?|What do I like to eat when I'm down?|Which cooking style is my top pick for dinner out?|If you had to pick a restaurant for me, what cuisine would it be?
o: {n} hates {v} food, which makes picking restaurants a nightmare.
o: A:{v} dishes often lean on fresh herbs and strong spices, easy to recreate at home.
== drink
v: oat flat white|cortado|iced americano|matcha latte|chai with extra cinnamon|double espresso|cold brew|cappuccino with almond milk|hot chocolate|earl grey
s: the barista knows my order now, {v}, every morning at 7:40.
s: I'm on my third {v} of the day, is that bad?
s: treated myself to a {v} and a croissant after the dentist.
s: the café by the office got my {v} wrong again, it's a small tragedy.
s: can't function before my {v}, seriously.
q: What's my go-to beverage?|What do I always get from the coffee shop?|Which hot drink keeps me running?|What do I order when I need a pick-me-up?|What's my usual cup?
o: {n} always orders a {v}, which I find deeply suspicious.
o: A:A {v} has roughly the same caffeine as a regular coffee, depending on the shop.
== phone
v: Pixel 8|iPhone 13 mini|Galaxy S23|Fairphone 5|iPhone 15 Pro|OnePlus 12|Moto G|Nothing Phone|iPhone SE|Galaxy Z Flip
s: my {v} battery is dying by 3pm now, is that normal?
s: dropped my {v} face-down on the tiles and somehow it survived.
s: the camera on my {v} is great for food photos, not so much for concerts.
s: can you help me free up space on my {v}? it keeps complaining storage is full.
s: my {v} updated overnight and now all my icons moved.
q: What handset do I use?|Which mobile do I carry?|What model of smartphone do I have?|What device am I texting from?|Which cell do I own?
o: {n} swears by the {v} and wants me to switch.
o: A:On the {v}, storage settings let you offload unused apps automatically.
== dentist
v: Dr. Okafor|Dr. Lindqvist|Dr. Patel|Dr. Moreau|Dr. Castillo|Dr. Nakamura|Dr. Brennan|Dr. Haddad|Dr. Kowalski|Dr. Achebe
s: dentist appointment with {v} on Tuesday, already dreading it.
s: {v} says I need to floss more, which is what I hear every six months.
s: my cleaning with {v} got moved to next month, small mercies.
s: {v} found a tiny cavity, so I'm getting a filling next week.
s: I really like {v}, the only dentist who doesn't lecture me.
q: Who looks after my teeth?|Which dental professional do I see?|What's the name of the person who checks my molars?|Who do I go to for my checkups on my mouth?|Who's my tooth doctor?
o: my GP {v} wants me to get bloodwork done, ugh.
o: {n} recommended her dentist {v} but they're not taking new patients.
== momsbirthday
v: March 3|June 14|September 22|January 9|November 30|April 18|July 27|October 5|February 11|August 16
s: my mom's birthday is {v}, so I need to order flowers well before then.
s: reminder: Mom turns sixty on {v} and my brother has already planned nothing.
s: every year on {v} we take my mother out for dim sum, it's tradition.
s: I have {v} circled on my calendar for Mum's big day, she'll kill me if I forget again.
s: mom's birthday falls on {v}, and I still owe her a visit.
q: When was my mother born, day and month?|What date should I remember for my mother's celebration?|On what day does my mother get a year older?|When do I need to call my mother with wishes?|What's the date of my mother's special day each year?
o: my dad's birthday is {v}, so our family spends a lot in one month.
o: {n}'s birthday is {v} and I've already forgotten twice.
== nephew
v: Leo|Milo|Arlo|Felix|Omar|Kai|Jasper|Ezra|Hugo|Rafi
s: my nephew {v} is turning five and wants a dinosaur cake, how hard can that be?
s: babysat my nephew {v} today, I'm more tired than after a marathon.
s: {v}, my brother's kid, just lost his first tooth and sent me a video.
s: my nephew {v} asked me why the sky is blue and I had to google it.
s: taking {v} to the aquarium on Sunday, he's obsessed with octopuses.
q: What's my brother's son called?|What's the name of the little boy in my family I look after sometimes?|Who is my sibling's young child?|Remind me of the name of my brother's little one?|What's the name of the youngster I'm an uncle or aunt to?
o: {n}'s son {v} is in the same class as my nephew, they're inseparable.
o: my neighbour's kid {v} keeps kicking his football into our garden.
== commute
v: bike in|take the ferry|ride the tram|scoot in on my e-scooter|take the commuter train|carpool with two coworkers|catch the express bus|walk the whole way|take the subway|ride my motorbike
s: I {v} to work most days, and today it was absolutely pouring.
s: since I {v} to the office, I've been listening to way more audiobooks.
s: honestly I {v} every morning and it's the only calm part of my day.
s: had to {v} an hour earlier today because of the big client visit.
s: the best part of my week is when I {v} and see the sunrise.
q: How do I get to my job?|What's my way of getting to the workplace?|How do I travel in for work usually?|What's my mode of transport for the daily trek?|How do I normally make it in to my desk?
o: {n} likes to {v} to work, but it'd add an hour to my day.
o: A:People who {v} to work often report less commute stress, though weather is a factor.
== diet
v: vegetarian|vegan|pescatarian|gluten-free|dairy-free|keto|low-FODMAP|flexitarian|plant-based on weekdays|sugar-free
s: I've been {v} for about two years now, so menus with one option drive me mad.
s: going {v} was the best decision I've made for my energy levels.
s: any ideas for a {v} dinner party menu? I don't want to serve sad salad.
s: the office lunch order never has anything {v} and I'm tired of eating crisps.
s: my family still thinks being {v} is a phase, it's been years.
q: What kind of eating plan do I follow?|What's my dietary choice?|How do I eat, any restrictions by choice?|What sort of diet have I adopted?|What category of eater am I?
o: {n} went {v} in January and lasted about nine days.
o: A:A {v} diet can be quite balanced with some planning around protein and iron.
== team
v: the Packers|Liverpool|the Celtics|the Yankees|Arsenal|the Seahawks|Real Madrid|the Cubs|the Maple Leafs|Ajax
s: {v} lost again and I'm in a bad mood, sorry if I'm short with you.
s: watching {v} with my dad on Sunday is basically the only time we talk.
s: I have {v} tickets for next weekend, first game in years.
s: my whole wardrobe is {v} merch at this point, my partner is begging me to stop.
s: {v} won in the last minute and I screamed so loud the neighbours knocked.
q: Which team do I root for?|Who do I support in sports?|What club am I a fan of?|Which side do I cheer on?|Whose matches do I follow religiously?
o: {n} supports {v} so we don't talk about sports.
o: A:{v} have had an up-and-down season; the fan forums are fun to read though.
== volunteer
v: the animal shelter|a food bank|the library literacy program|a community garden|a hospice|the soup kitchen|a refugee support centre|a youth football club|the river cleanup group|a mentoring charity
s: volunteered at {v} this morning, honestly the best part of my week.
s: my Saturday shifts at {v} are getting busier, they really need more people.
s: I've been helping out at {v} for a few months and I love it.
s: can you help me write a thank-you note to the team at {v}? They gave me a little award.
s: missed my shift at {v} because of a cold, felt bad all day.
q: Where do I do unpaid work?|What charity do I give my time to?|Which organization do I help for free?|Where do I spend hours doing good?|What's the cause I donate my time to?
o: {n} volunteers at {v} and keeps inviting me to join.
o: A:{v} usually welcomes one-off volunteers too, if you ever want to try.
== major
v: marine biology|art history|mechanical engineering|philosophy|economics|linguistics|anthropology|computer science|music theory|geography
s: I studied {v} at university and now I do something completely unrelated, classic.
s: my {v} degree finally came in handy at trivia night.
s: sometimes I miss my {v} lectures, I was such a nerd.
s: a former classmate from my {v} course just published a book.
s: my parents still ask when I'll use my {v} degree.
q: What was my major in college?|What subject did I get my diploma in?|What did I study after high school?|Which field did I specialise in academically?|What was my area of study as an undergrad?
o: {n} did {v} and somehow became a banker.
o: A:{v} graduates often end up in very varied careers.
== project
v: a birdhouse|a budgeting app|a mechanical keyboard|a retro arcade cabinet|a family cookbook|a podcast about local history|a vegetable planter box|a board game prototype|a home weather station|a quilt
s: spent all weekend on my side project, {v}, and it's finally coming together.
s: I'm working on {v} in the evenings, it's the only screen-free thing I do.
s: ordered parts for {v} today, this is going to cost more than I said it would.
s: can you help me plan the next steps for {v}? I keep stalling.
s: showed {v} to my friends and they didn't laugh, so I'm counting that as a win.
q: What am I making in my free time?|What's the personal build I've been tinkering with?|What DIY thing have I been fiddling with?|What's my passion project at the moment?|What am I creating after hours?
o: {n} is making {v} too and we've become weirdly competitive.
o: A:Projects like {v} are great to document with photos as you go.
== band
v: Fleetwood Mac|Radiohead|Beyonce|Arctic Monkeys|Taylor Swift|Bon Iver|Kendrick Lamar|ABBA|Daft Punk|Phoebe Bridgers
s: I've had {v} on repeat all week, my neighbours probably hate me.
s: {v} is coming to town and the tickets sold out in four minutes, I'm devastated.
s: cleaning the house is only possible with {v} blasting.
s: my whole playlist is {v} and my partner says I need help.
s: listening to {v} on the train always makes me feel like I'm in a movie.
q: Which musician do I listen to most?|Who's my favourite artist?|What act am I obsessed with musically?|Who do I play loud while doing chores?|Which singer or group is on constant rotation for me?
o: {n} can't stand {v}, which is the only flaw in our friendship.
o: A:{v}'s early albums are often considered their best.
== movie
v: Spirited Away|The Princess Bride|Alien|Amelie|Paddington 2|Jurassic Park|The Grand Budapest Hotel|Heat|Moonlight|Mad Max: Fury Road
s: I've watched {v} maybe fifteen times and I still cry at the same scene.
s: rainy Sunday means {v} and blankets, no exceptions.
s: can you believe some people haven't seen {v}? I'm making my coworkers watch it.
s: I quote {v} so often that my friends have banned it at dinner.
s: my all-time favourite film is {v}, fight me.
q: Which movie do I rewatch all the time?|What's my comfort cinema pick?|What motion picture do I love most?|Which flick do I keep going back to?|What's the one feature I'd take to a desert island?
o: {n} fell asleep during {v}, which I'm still not over.
o: A:{v} holds up well on rewatches, the craft is really visible.
== bestfriend
v: Jules|Marco|Priyanka|Owen|Bea|Tariq|Ruth|Finn|Camila|Ike
s: my best friend {v} and I have been friends since we were eight, she knows all my secrets.
s: {v} is the only person I'd call at 3am, and she'd pick up.
s: brunch with my oldest friend {v} on Sunday, we haven't seen each other in months.
s: {v}, my closest friend, is moving back to town and I'm so happy.
s: {v} and I still do our yearly camping trip, twenty years strong.
q: Who's my closest pal?|Who have I known the longest of all my mates?|Who would I phone in an emergency in the middle of the night?|What's the name of my BFF?|Who is my number one buddy?
o: my partner's best friend {v} is staying with us this week.
o: {n}'s best friend {v} crashed our dinner and stayed till midnight.
"#;

const BANK: &str = r#"
== names
v: Dana|Lucia|Bram|Odette|Jasper K.|Nia|Soren|Paloma|Viktor|Ama|Cyrus|Lotte|Emeka|Harriet|Omar|Kenji|Beatriz|Hamid|Sienna|Tomasz|Ayo|Greta|Rohan|Ines|Callum|Mira|Nikolai|Zara|Pablo|Yara|Hugh|Esme|Ravi|Celeste|Anton|Freya|Idris|Maren|Luca|Soraya|Wes|Talia
== relmove
v: cousin|aunt|uncle|brother-in-law|godmother|stepbrother|niece
p: just finished nursing school=nurse|passed the bar exam=lawyer|got a pilot's license=aviator|defended a PhD in chemistry=scientist|opened a little bakery=pastry maker|started a residency in surgery=doctor|got tenure at the university=professor|got hired as a sommelier=wine expert
c: Porto|Denver|Montreal|Glasgow|Osaka|Austin|Wellington|Valencia|Minneapolis|Krakow|Nairobi|Edinburgh
a: my {rel} {name} {prof}, the whole family is so proud.
a: big news in the family: {name}, my {rel}, {prof} after years of work.
a: called my {rel} {name} tonight to say congrats, {name} {prof} and we're all thrilled.
b: {name}'s moving to {city} next month, I'm already planning a visit.
b: {name} found an apartment in {city}, so I guess that's really happening.
b: helped {name} pack up boxes all day, the move to {city} is this weekend.
q: Which city is my {rel} the {noun} relocating to?
q: Where is the {noun} in my family going to live?
q: My {rel} who became a {noun}: where are they heading?
q: What city will my relative the {noun} be settling in?
q: Where's my newly qualified {noun} {rel} off to?
== gift
r: old roommate=the person I used to share a flat with|climbing buddy=my friend from the wall|college friend=my pal from university|former colleague=the person I used to work with|neighbour across the hall=the person living next to me
g: a fancy chef's knife|a vintage record player|a pottery class voucher|a weighted blanket|a rare houseplant|concert tickets|a leather notebook|a espresso machine|a tarot deck|a hammock
a: my {rel} {name} came over for dinner last night and we talked until 1am.
a: ran into {name}, my {rel}, at the market and we caught up for an hour.
a: {name} (my {rel}) texted me out of the blue, it's been ages.
b: got {name} {gift} for their birthday, hope they like it.
b: wrapped {gift} for {name} tonight, birthday party is tomorrow.
b: ordered {gift} as {name}'s birthday present, it arrives Thursday.
q: What present did I buy for {relq}?
q: What did I give {relq} on their birthday?
q: Which gift did I pick out for {relq}?
q: What was my birthday surprise for {relq}?
q: What did I get {relq} when they turned a year older?
== recommend
r: accounting=finance|legal=the lawyers' department|marketing=the branding group|IT=tech support|design=the creative crew|sales=the deal-closing team
x: Casa Lupe|the Golden Lantern|Osteria Nonna|Blue Fig|Smoke & Ember|Tandoor House|Little Saigon Kitchen|Pier 9 Oyster Bar|The Green Room|Bao Down
a: {name} from {dept} started sitting next to me, finally someone who laughs at my jokes.
a: had lunch with {name} from {dept} today, turns out we went to the same school.
a: {name} just transferred into {dept} and already knows everyone's coffee order.
b: {name} recommended {rest}, we're trying it on Friday.
b: {name} swears {rest} has the best food in town, so that's dinner sorted.
b: went to {rest} because {name} wouldn't stop talking about it, and wow.
q: Which restaurant did my coworker from {deptq} suggest?
q: Where did the person in {deptq} tell me to eat?
q: What place to eat was recommended by my colleague in {deptq}?
q: Which spot did my {deptq} work friend rave about?
q: Where did my officemate from {deptq} send me for dinner?
== plants
x: monstera|snake plant|fiddle-leaf fig|pothos|peace lily|rubber tree|ZZ plant|calathea|string of pearls|bird of paradise
b: picked up a {plant} at the weekend market, my windowsill is getting crowded.
b: couldn't resist a {plant} at the garden centre, it was on sale.
b: bought a little {plant} for the bathroom, apparently it likes the humidity.
d: {name} bought a {plant} and it died in a week, I'm not taking that as a sign.
d: almost bought a {plant} today but I have nowhere to put it.
q: How many houseplants have I brought home?
q: How many pieces of greenery have I added to my place?
q: What's the total number of potted greens I've purchased?
q: How many new leafy friends live with me now?
q: Count the indoor plants I've acquired, how many?
== wedding
r: cousin=cousin|college roommate=old university flatmate|coworker=office mate|childhood friend=friend from when I was little|brother=brother
x: a vineyard in Napa|an old lighthouse|a botanical garden|a ski lodge|a converted barn|a castle in Scotland|a rooftop bar|a lakeside cabin
a: my {rel} {name} just got engaged!! I screamed when I saw the ring.
a: {name}, my {rel}, called to say they're getting married next summer.
b: {name}'s wedding is going to be at {venue}, I need to start saving now.
b: {name} booked {venue} for the ceremony, very on brand.
q: Where is my {relq}'s ceremony being held?
q: What venue did my {relq} choose to tie the knot?
q: Where will my {relq} get married?
q: Where's the big day for my {relq}?
q: Which location did my {relq} book for the wedding?
== update_city
v: Boston|Chicago|Seattle|Philadelphia|Portland|Atlanta|Phoenix|Baltimore|Dallas|San Diego
a: our {a} apartment has the worst water pressure, I'm showering in a trickle.
a: living in {a} is great until you try to find parking.
a: {a} in the winter is so grey, I need a vacation.
b: we finally moved to {b}! boxes everywhere, but the light in the new place is amazing.
b: first week living in {b} and I already have a favourite bakery.
b: update: the move to {b} is done, the truck was three hours late but everything survived.
d: we looked at a place in {c} but the landlord ghosted us, so that's off.
q: Where am I based these days?
q: Which city is home for me right now?
q: What city do I currently reside in?
q: Where's my current address, which town?
q: Where do I live at the moment?
== update_employer
v: Northwind Logistics|Bluepeak Analytics|Harbor & Finch|Sundial Health|Orbital Foods|Kestrel Labs|Granite Insurance|Lumen Textiles|Pinecone Media|Riverbend Bank
a: another pointless meeting at {a} today, I could have been an email.
a: {a} is doing layoffs again, everyone's on edge.
a: my desk at {a} is next to the printer, which is loud and emotionally draining.
b: I start at {b} on Monday, nervous!
b: first week at {b} done, everyone is so nice it's suspicious.
b: signed the offer from {b}, handing in my notice tomorrow.
d: I interviewed at {c} too but turned it down, the commute was too long.
q: Who's my current employer?
q: Which company am I working for now?
q: Where do I work at present?
q: What firm did I end up at?
q: Which organisation signs my paychecks these days?
== update_car
v: Subaru Outback|Honda Civic|Toyota Prius|Mazda 3|VW Golf|Ford Ranger|Kia Niro|Volvo XC40|Hyundai Ioniq|Mini Cooper
a: my old {a} failed its inspection, again.
a: the {a} needs new tyres and I'm not sure it's worth it.
a: the heater in my {a} only works on full blast, so winter is fun.
b: picked up my new {b} today, it still smells like the dealership.
b: sold the old one and got a {b}, finally a car with working heating.
b: the {b} is officially mine, first drive was so smooth.
d: test drove a {c} but the price was silly.
q: What vehicle do I have now?
q: Which car am I driving these days?
q: What's my current set of wheels?
q: What do I drive at the moment?
q: Which automobile do I own now?
== update_phone
v: Pixel 8|iPhone 13 mini|Galaxy S23|Fairphone 5|iPhone 15 Pro|OnePlus 12|Moto G|Nothing Phone|iPhone SE|Galaxy Z Flip
a: my {a} screen cracked again, third time this year.
a: the {a} battery barely lasts till lunch now.
b: finally upgraded to a {b}, setting it up took all evening.
b: my new {b} arrived today and the camera is unreal.
b: switched to a {b} last week, still learning the gestures.
d: {name} tried to sell me their old {c}, no thanks.
q: Which handset am I using now?
q: What mobile do I currently carry?
q: What's my present smartphone?
q: What device am I texting from these days?
q: Which cell do I have at the moment?
== update_workout
v: spin class|CrossFit|yoga|swimming laps|Pilates|kickboxing|rowing|barre|trail running|weightlifting
a: {a} three mornings a week is my thing, I'm hooked.
a: did {a} again today, my legs are jelly.
b: I quit the old routine and switched to {b}, way more my speed.
b: new plan: {b} only from now on, my knees told me so.
b: been doing {b} instead for a month now, no regrets.
d: tried one session of {c}, never again.
q: How do I work out nowadays?
q: What's my current exercise of choice?
q: Which training am I doing lately?
q: What fitness activity have I settled on now?
q: How am I keeping fit at present?
== dish
x: shakshuka|a mushroom risotto|lamb tagine|butternut squash soup|chicken katsu curry|homemade gnocchi|a big pot of chili|paella|pad see ew|a lasagna
s: made {dish} on Sunday and there are leftovers for days.
s: I cooked {dish} this weekend and actually didn't burn anything.
s: tried {dish} from a video on Saturday, turned out better than expected.
== trip
x: Lisbon|Reykjavik|Marrakech|Kyoto|Prague|Mexico City|Budapest|Seville|Vancouver|Istanbul
s: flying to {city} on Friday for a long weekend and I haven't packed a thing.
s: heading to {city} in a few days, any tips for what to pack?
d: we were supposed to go to {city} but the flights got cancelled, so never mind.
q: What did I cook the weekend before my trip to {city}?
q: Right before I flew out to {city}, what meal did I make?
q: What was on my stove in the days before {city}?
q: Before the {city} getaway, which dinner did I prepare?
q: What food did I whip up just prior to visiting {city}?
== book
x: Pachinko|The Overstory|Piranesi|Circe|The Remains of the Day|Station Eleven|Klara and the Sun|A Gentleman in Moscow|The Name of the Wind|Educated|Project Hail Mary|Normal People
s: started reading {book} on the train, already hooked.
s: I'm halfway through {book} and can't put it down.
s: {book} is my bedtime book this month, slow but lovely.
d: {name} recommended {book}, adding it to the list for someday.
q: Which book was I reading {when}?
q: What novel did I have on the go {when}?
q: What was on my nightstand {when}?
q: {When}, what title was I working through?
q: What story was I absorbed in {when}?
== pair
x: signed up for the autumn half marathon, what have I done.=I ran the half marathon today! 2:14, I'm dead but happy.=How many weeks did I have between registering for the long race and actually running it?
x: had my first driving lesson today, I stalled four times in the car park.=I PASSED my driving test!! no more buses for me.=How many weeks passed between my first lesson behind the wheel and getting my licence?
x: demolition day for the kitchen reno, there's dust in places I didn't know existed.=the kitchen is finally done, I can cook again!=How long, in weeks, did the renovation of my cooking space take?
x: sprained my wrist falling off a scooter, typing with one hand.=physio says my wrist is fully healed, back to normal.=How many weeks did my injured arm take to recover?
x: ordered a new sofa today, they said delivery in "a few weeks", we'll see.=the sofa finally arrived! I've been lying on it for hours.=How many weeks did I wait for my couch to show up?
x: planted tomato seeds on the windowsill, fingers crossed.=picked my first tomato today, it tasted like victory.=How many weeks from sowing to my first harvest?
== event
x: I ran my first 10k this morning! slow, but I didn't stop once.=my first ten-kilometre race=finish my first long-distance race
x: got my wisdom teeth out yesterday, living on soup and self-pity.=the oral surgery=have that dental surgery
x: went to a silent disco last night, it was weirder and better than I expected.=the headphone dance party=go to the headphone party
x: we had a power cut for 14 hours, I read by candlelight like a Victorian.=the long blackout=lose electricity for most of a day
x: my laptop died in the middle of a deadline, I lost a whole afternoon of work.=the computer crash=lose work when my computer broke
x: I got a tattoo! small, on my wrist, a little swallow.=getting inked=get inked
x: I went skydiving for my friend's birthday and screamed the entire way down.=jumping out of a plane=jump out of a plane
x: got locked out of the flat last night and had to wait for a locksmith at midnight.=the lockout=get stuck outside my own home
x: met my favourite author at a signing today and forgot how to speak.=meeting that writer=meet that writer in person
x: went camping in the rain all weekend and everything I own is damp.=the soggy tent weekend=sleep outdoors in a downpour
x: gave a talk at a conference for the first time and my hands were shaking.=my first conference presentation=speak on stage at that industry event
x: got food poisoning from a food truck and lost two days of my life.=the stomach bug from street food=get sick from street food
x: won the pub quiz with my team last night, we got a trophy shaped like a pineapple.=the trivia win=win trivia night
== show
x: Severance|The Bear|Succession|Slow Horses|Shrinking|Ted Lasso|Abbott Elementary|The Last of Us|Only Murders in the Building|Fleabag|Dark|Reservation Dogs
s: I'm completely hooked on {show}, watched four episodes in a row last night.
s: started {show} on everyone's recommendation and now I get it.
s: {show} is ruining my sleep schedule, one more episode is a lie.
q: What series was I bingeing around the time of {np}?
q: Around {np}, which TV programme had me glued to the screen?
q: What was I watching on telly when {np} happened?
q: Which show was I into back during {np}?
q: At the time of {np}, what was my nightly viewing?
== order
q: Which happened first, {np1} or {np2}?
q: Did {np1} come before or after {np2}?
q: What came earlier: {np1} or {np2}?
q: Put these in order for me: {np1}, {np2}.
q: Was {np1} earlier than {np2}?
== ago
q: About how many months ago did I {vp}?
q: Roughly how long ago did I {vp}, in months?
q: How many months have passed since I {vp}?
q: When did I {vp}, how many months back?
q: It's been how many months since I {vp}?
"#;

const FILLER: &str = r#"
== greet
u: hey, me again.|morning! quick one today.|hi, got a minute?|hello again, it's been a while.|ok I'm back, round two.|evening! long week.
a: Hi! Good to hear from you, what's on your mind?|Welcome back. How can I help today?|Hey! Happy to help, go ahead.|Hello again! What are we working on?
== ack
a: That sounds like a lot, honestly. Want me to help you plan around it this week?|Ha, that's very relatable. Anything I can do to make the rest of the day easier?|Noted! Sounds like quite a week. What would you like to tackle first?|Oh no, or oh yes, hard to tell! How are you feeling about it?|That's great to hear. Do you want to get back to what we were discussing?|Thanks for sharing that. Shall I add anything to your reminders?|I love that. Let me know if you want ideas related to it.|Fair enough! Life keeps things interesting. What else is going on?
== cooking
u: what's a quick weeknight dinner that doesn't need more than five ingredients?|how long do I roast vegetables for, roughly? I always forget.|can I freeze cooked rice or is that a bad idea?|I need a lunch idea that survives being in a bag all morning.|what can I substitute for buttermilk in pancakes?|how do I stop onions from burning before they soften?
a: A sheet-pan dinner works well: chopped vegetables, a protein, olive oil, salt, 25 minutes at 220°C.|Usually 25 to 40 minutes at around 200°C depending on size; toss them halfway through.|Yes, cool it quickly, freeze in flat portions and reheat until steaming hot.|Grain salads hold up well: farro or couscous with roasted veg and a sharp dressing added late.|Mix a cup of milk with a tablespoon of lemon juice and let it sit for five minutes.|Lower the heat, add a pinch of salt early and a splash of water if they start to catch.
== travel
u: what's the best way to avoid jet lag on a long flight?|is it worth getting travel insurance for a short trip?|how early should I get to the airport for an international flight?|any tips for packing light with only a carry-on?|what's a good way to keep track of bookings in one place?
a: Shift your sleep an hour a day beforehand, hydrate, and get daylight when you land.|For short trips it mostly depends on how much is non-refundable and on your health cover.|Two to three hours is a safe rule for international flights, more at busy hubs.|Roll clothes, plan outfits around two colours, and wear your bulkiest shoes on the plane.|A shared note or a spreadsheet with confirmation numbers and check-in times works well.
== work
u: how do I write a polite email declining a meeting?|can you help me structure a status update for my team?|I keep procrastinating on a big report, any tricks?|what's a good way to run a shorter meeting?|how should I ask for feedback without it being awkward?|how do I say no to extra work without sounding lazy?
a: Thank them, say you can't attend, and offer an alternative like async notes or a later slot.|Try three headings: done this week, in progress, blocked; keep each item to one line.|Break it into 25-minute blocks and start with the easiest section to build momentum.|Send an agenda ahead, name a decision you need, and end five minutes early.|Ask a specific question, like what one thing you could do differently next time.|Explain your current priorities and ask which should move if the new task comes first.
== fitness
u: how many rest days should I take a week?|what's a decent stretch routine after a run?|is it bad to work out late at night?|how do I stay motivated when it's cold and dark?|how much water should I drink on a training day?
a: One or two rest days suit most people; listen to soreness and sleep quality.|Hamstrings, calves, hip flexors and quads, about 30 seconds each, gently.|Not really, though intense sessions close to bedtime can make sleep lighter.|Plan sessions in your calendar, lay out kit the night before, and find a buddy.|Roughly enough that your urine is pale; add more around longer sessions.
== books
u: can you recommend a short novel for a weekend?|how do people read fifty books a year? I'm stuck at five.|audiobooks count as reading, right?|what's a good way to remember what I read?
a: A novella is perfect for a weekend; many classics run under 150 pages.|Mostly small habits: reading on commutes, always carrying a book, dropping ones you dislike.|Absolutely, listening still gets you the story and the ideas.|Jot three bullet points when you finish a book, or talk about it with someone.
== tech
u: my laptop fan is really loud lately, what should I check?|how do I set up a password manager without losing everything?|what's the easiest way to back up photos automatically?|my wifi keeps dropping in the evenings, any ideas?|can you explain what a VPN actually does?|spreadsheet question: how do I count cells that match a word?
a: Check for dusty vents and background processes with high CPU; a cleanup often fixes it.|Pick one, set a strong master password, enable two-factor and save the recovery codes offline.|Most phones offer automatic cloud backup; an external drive as a second copy is wise.|It might be channel congestion; try switching the router to a less busy channel.|It encrypts your traffic and routes it through another server, hiding it from your local network.|Use COUNTIF with the range and the word, for example COUNTIF(A:A, "done").
== home
u: how often should I actually wash my bedsheets?|any tips for getting rid of fruit flies?|what's the best way to clean a really greasy oven?|how do I make a small room feel bigger?
a: Once a week or every two weeks is the usual advice.|A small dish of vinegar with a drop of dish soap works surprisingly well.|A paste of baking soda and water left overnight, then wiped and rinsed with vinegar.|Light colours, a large mirror and furniture with visible legs all help.
== money
u: is it better to pay off debt or save first?|how do I make a budget I'll actually stick to?|what's a sensible emergency fund size?|should I cancel subscriptions I barely use? how do I even find them?
a: Usually build a small buffer first, then pay off the highest-interest debt.|Start with fixed costs, set a weekly spending amount, and review it every Sunday.|Three to six months of essential expenses is the common guideline.|Scan your bank statements for recurring charges; cancelling a few adds up quickly.
== mood
u: the weather has been so grey, I feel sluggish all the time.|I can't seem to fall asleep before 1am lately.|how do I stop doomscrolling before bed?|I'm trying to be better at keeping in touch with friends.
a: Getting outside in daylight in the morning, even briefly, can help with energy.|A consistent wake-up time and no screens in the last half hour often help.|Charge your phone outside the bedroom and keep a book by the bed instead.|A recurring reminder to message one person a week is a gentle start.
"#;

// ---------------------------------------------------------------------------------------------
// Building one conversation.

const PREFIX: [&str; 10] = [
    "",
    "",
    "",
    "so, ",
    "random update: ",
    "okay so ",
    "quick thing before I forget: ",
    "not important but ",
    "anyway, ",
    "lol ",
];
const SUFFIX: [&str; 8] = [
    "",
    "",
    "",
    " Anyway, what should I make for dinner?",
    " Not sure why I'm telling you this.",
    " Can you help me plan the rest of the week?",
    " Life, right?",
    " Anyway, back to my actual question in a sec.",
];

/// A handle to a placed turn: (session, index among that session's placed items).
type H = (usize, usize);

struct Item {
    user: bool,
    text: String,
}

struct Q {
    text: String,
    kind: &'static str,
    ev: Vec<H>,
}

struct Conv<'a> {
    rng: Rng,
    dates: Vec<i64>,
    items: Vec<Vec<Item>>,
    qs: Vec<Q>,
    names: Vec<&'a str>,
    all_names: Vec<&'a str>,
}

fn cap(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl<'a> Conv<'a> {
    /// Places a turn; templates starting with `A:` are the assistant's.
    fn put(&mut self, s: usize, text: &str) -> H {
        let (user, body) = match text.strip_prefix("A:") {
            Some(b) => (false, cap(b)),
            None => {
                let p = self.rng.pick(&PREFIX);
                let x = self.rng.pick(&SUFFIX);
                (true, format!("{}{x}", cap(&format!("{p}{text}"))))
            }
        };
        self.items[s].push(Item { user, text: body });
        (s, self.items[s].len() - 1)
    }
    /// Places one template of `ts`, filled with `vars`.
    fn put_pick(&mut self, s: usize, ts: &[&str], vars: &[(&str, &str)]) -> H {
        let t = fill(self.rng.pick(ts), vars);
        self.put(s, &t)
    }
    /// A session in `lo..=hi` with few placed items.
    fn sess(&mut self, lo: usize, hi: usize) -> usize {
        let hi = hi.min(self.dates.len() - 1);
        let lo = lo.min(hi);
        for _ in 0..6 {
            let s = self.rng.range(lo, hi);
            if self.items[s].len() < 9 {
                return s;
            }
        }
        (lo..=hi).min_by_key(|&s| self.items[s].len()).unwrap_or(lo)
    }
    fn name(&mut self) -> &'a str {
        if self.names.is_empty() {
            self.names = self.all_names.clone();
        }
        let i = self.rng.below(self.names.len());
        self.names.swap_remove(i)
    }
    fn q(&mut self, kind: &'static str, text: String, ev: Vec<H>) {
        self.qs.push(Q { text, kind, ev });
    }
}

/// Draws `k` distinct values.
fn draw<'b>(rng: &mut Rng, xs: &[&'b str], k: usize) -> Vec<&'b str> {
    let mut v = xs.to_vec();
    rng.shuffle(&mut v);
    v.truncate(k);
    v
}

const UPDATES: [(&str, &str); 5] = [
    ("update_city", ""),
    ("update_employer", "employer"),
    ("update_car", "car"),
    ("update_phone", "phone"),
    ("update_workout", "workout"),
];

fn single(c: &mut Conv, f: &Sec) {
    let vals = draw(&mut c.rng, &f.vals("v"), 3);
    let n = c.dates.len();
    let s = c.sess(0, n - 1);
    let h = c.put_pick(s, &f.all("s"), &[("v", vals[0])]);
    let others = f.all("o");
    for (i, o) in others.iter().enumerate() {
        if c.rng.chance(0.8) {
            let nm = c.name();
            let s2 = c.sess(0, n - 1);
            c.put(s2, &fill(o, &[("v", vals[1 + i % 2]), ("n", nm)]));
        }
    }
    let q = c.rng.pick(&f.vals("q")).to_string();
    c.q("single", q, vec![h]);
}

fn update(c: &mut Conv, b: &Sec) {
    let vals = draw(&mut c.rng, &b.vals("v"), 3);
    let n = c.dates.len();
    let s1 = c.sess(0, n / 2 - 1);
    let s2 = c.sess(s1 + 2, n - 1).max(s1 + 1);
    let vars = [("a", vals[0]), ("b", vals[1]), ("c", vals[2])];
    c.put_pick(s1, &b.all("a"), &vars);
    if c.rng.chance(0.5) {
        c.put_pick(s1, &b.all("a"), &vars);
    }
    let h = c.put_pick(s2, &b.all("b"), &vars);
    let nm = c.name();
    let sd = c.sess(0, n - 1);
    c.put(
        sd,
        &fill(b.all("d")[0], &[vars[0], vars[1], vars[2], ("name", nm)]),
    );
    let q = c.rng.pick(&b.vals("q")).to_string();
    c.q("update", q, vec![h]);
}

fn split_eq(s: &str) -> Vec<&str> {
    s.split('=').collect()
}

/// An entity introduced with a relation in one session (`a`), named again later (`b`).
fn multi(c: &mut Conv, b: &Sec, used: &mut Vec<String>) {
    let n = c.dates.len();
    let nm = c.name();
    let s1 = c.sess(0, n - 3);
    let s2 = c.sess(s1 + 1, n - 1).max(s1 + 1);
    let mut vars: Vec<(&str, String)> = vec![("name", nm.to_string())];
    let mut distractor: Option<(String, String)> = None;
    match b.key.as_str() {
        "relmove" => {
            let rels: Vec<&str> = b
                .vals("v")
                .into_iter()
                .filter(|r| !used.contains(&r.to_string()))
                .collect();
            let rel = c.rng.pick(&rels);
            used.push(rel.to_string());
            let p = split_eq(c.rng.pick(&b.vals("p")));
            let cities = draw(&mut c.rng, &b.vals("c"), 2);
            vars.extend([
                ("rel", rel.to_string()),
                ("prof", p[0].into()),
                ("noun", p[1].into()),
                ("city", cities[0].into()),
            ]);
            distractor = Some(("b".into(), cities[1].into()));
        }
        "gift" | "wedding" => {
            let rs: Vec<&str> = b
                .vals("r")
                .into_iter()
                .filter(|r| !used.contains(&r.to_string()))
                .collect();
            let r = split_eq(c.rng.pick(&rs));
            used.push(format!("{}={}", r[0], r[1]));
            let key = if b.key == "gift" { "g" } else { "x" };
            let xs = draw(&mut c.rng, &b.vals(key), 2);
            let relq = r[1].to_string();
            vars.extend([
                ("rel", r[0].to_string()),
                ("relq", relq),
                ("gift", xs[0].into()),
                ("venue", xs[0].into()),
            ]);
            distractor = Some(("b".into(), xs[1].into()));
        }
        "recommend" => {
            let rs: Vec<&str> = b
                .vals("r")
                .into_iter()
                .filter(|r| !used.contains(&r.to_string()))
                .collect();
            let r = split_eq(c.rng.pick(&rs));
            used.push(format!("{}={}", r[0], r[1]));
            let xs = draw(&mut c.rng, &b.vals("x"), 2);
            vars.extend([
                ("dept", r[0].to_string()),
                ("deptq", r[1].to_string()),
                ("rest", xs[0].into()),
            ]);
            distractor = Some(("b".into(), xs[1].into()));
        }
        _ => {}
    }
    let v: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ha = c.put_pick(s1, &b.all("a"), &v);
    let hb = c.put_pick(s2, &b.all("b"), &v);
    if let Some((field, val)) = distractor {
        // The same kind of event about someone never introduced with that relation.
        let other = c.name();
        let mut dv: Vec<(&str, &str)> = vec![("name", other)];
        for slot in ["city", "gift", "venue", "rest"] {
            dv.push((slot, val.as_str()));
        }
        dv.extend(v.iter().copied());
        let sd = c.sess(0, n - 1);
        let t = fill(c.rng.pick(&b.all(&field)), &dv);
        c.put(sd, &t);
    }
    let q = fill(c.rng.pick(&b.vals("q")), &v);
    c.q("multi", q, vec![ha, hb]);
}

fn plants(c: &mut Conv, b: &Sec) {
    let n = c.dates.len();
    let k = c.rng.range(2, 3);
    let ps = draw(&mut c.rng, &b.vals("x"), k + 2);
    let mut ev = Vec::new();
    for p in ps.iter().take(k) {
        let s = c.sess(0, n - 1);
        ev.push(c.put_pick(s, &b.all("b"), &[("plant", p)]));
    }
    for (i, d) in b.all("d").iter().enumerate() {
        let nm = c.name();
        let s = c.sess(0, n - 1);
        c.put(s, &fill(d, &[("plant", ps[k + i]), ("name", nm)]));
    }
    let q = c.rng.pick(&b.vals("q")).to_string();
    c.q("multi", q, ev);
}

fn month_of(z: i64) -> (i64, i64) {
    let (y, m, _) = civil(z);
    (y, m)
}

/// Dish cooked in the same session as a trip is announced; dishes elsewhere are distractors.
fn t_trip(c: &mut Conv, bank: &[Sec]) {
    let (dish, trip) = (find(bank, "dish"), find(bank, "trip"));
    let n = c.dates.len();
    let dishes = draw(&mut c.rng, &dish.vals("x"), 3);
    let cities = draw(&mut c.rng, &trip.vals("x"), 2);
    let s = c.sess(1, n - 2);
    let hd = c.put_pick(s, &dish.all("s"), &[("dish", dishes[0])]);
    let ht = c.put_pick(s, &trip.all("s"), &[("city", cities[0])]);
    for (i, lohi) in [(0, s - 1), (s + 1, n - 1)].iter().enumerate() {
        let sd = c.sess(lohi.0, lohi.1);
        if sd != s {
            c.put_pick(sd, &dish.all("s"), &[("dish", dishes[1 + i])]);
        }
    }
    let sd = c.sess(0, n - 1);
    c.put(sd, &fill(trip.all("d")[0], &[("city", cities[1])]));
    let q = fill(c.rng.pick(&trip.vals("q")), &[("city", cities[0])]);
    c.q("temporal", q, vec![hd, ht]);
}

/// Books read in sessions of distinct months; the question names one month.
fn t_book(c: &mut Conv, bank: &[Sec], qdate: i64) {
    let b = find(bank, "book");
    let n = c.dates.len();
    let mut order: Vec<usize> = (0..n).collect();
    c.rng.shuffle(&mut order);
    let mut chosen: Vec<usize> = Vec::new();
    for s in order {
        let m = month_of(c.dates[s]);
        if chosen.len() < 3 && chosen.iter().all(|&o| month_of(c.dates[o]) != m) {
            chosen.push(s);
        }
    }
    let books = draw(&mut c.rng, &b.vals("x"), chosen.len() + 1);
    let mut hs = Vec::new();
    for (i, &s) in chosen.iter().enumerate() {
        hs.push(c.put_pick(s, &b.all("s"), &[("book", books[i])]));
    }
    let nm = c.name();
    let sd = c.sess(0, n - 1);
    c.put(
        sd,
        &fill(
            b.all("d")[0],
            &[("book", books[chosen.len()]), ("name", nm)],
        ),
    );
    let t = c.rng.below(chosen.len());
    let (ty, tm) = month_of(c.dates[chosen[t]]);
    let (qy, qm) = month_of(qdate);
    let last_year = if tm < qm { qy } else { qy - 1 };
    let mname = MONTHS[(tm - 1) as usize];
    let when = if ty == last_year && c.rng.chance(0.6) {
        format!("last {mname}")
    } else if c.rng.chance(0.5) {
        format!("back in {mname} {ty}")
    } else {
        format!("in {mname} {ty}")
    };
    let q = fill(
        c.rng.pick(&b.vals("q")),
        &[("when", &when), ("When", &cap(&when))],
    );
    c.q("temporal", q, vec![hs[t]]);
}

/// Two events in different sessions: weeks between.
fn t_pair(c: &mut Conv, bank: &[Sec], used: &mut Vec<usize>) {
    let b = find(bank, "pair");
    let xs = b.all("x");
    let free: Vec<usize> = (0..xs.len()).filter(|i| !used.contains(i)).collect();
    let i = free[c.rng.below(free.len())];
    used.push(i);
    let p = split_eq(xs[i]);
    let n = c.dates.len();
    let s1 = c.sess(0, n - 3);
    let s2 = c.sess(s1 + 1, (s1 + 5).min(n - 1)).max(s1 + 1);
    let h1 = c.put(s1, p[0]);
    let h2 = c.put(s2, p[1]);
    c.q("temporal", p[2].to_string(), vec![h1, h2]);
}

/// One-off events: `(turn, noun phrase, verb phrase)`.
fn events<'b>(c: &mut Conv, bank: &'b [Sec]) -> Vec<Vec<&'b str>> {
    let mut ev: Vec<Vec<&str>> = find(bank, "event")
        .all("x")
        .into_iter()
        .map(split_eq)
        .collect();
    c.rng.shuffle(&mut ev);
    ev
}

fn t_order(c: &mut Conv, bank: &[Sec], e1: &[&str], e2: &[&str]) {
    let n = c.dates.len();
    let s1 = c.sess(0, n - 2);
    let s2 = c.sess(s1 + 1, n - 1).max(s1 + 1);
    let h1 = c.put(s1, e1[0]);
    let h2 = c.put(s2, e2[0]);
    let (a, b) = if c.rng.chance(0.5) {
        (e1, e2)
    } else {
        (e2, e1)
    };
    let q = fill(
        c.rng.pick(&find(bank, "order").vals("q")),
        &[("np1", a[1]), ("np2", b[1])],
    );
    c.q("temporal", q, vec![h1, h2]);
}

fn t_show(c: &mut Conv, bank: &[Sec], e: &[&str]) {
    let b = find(bank, "show");
    let n = c.dates.len();
    let shows = draw(&mut c.rng, &b.vals("x"), 3);
    let s = c.sess(1, n - 2);
    let he = c.put(s, e[0]);
    let hs = c.put_pick(s, &b.all("s"), &[("show", shows[0])]);
    for (i, (lo, hi)) in [(0, s - 1), (s + 1, n - 1)].into_iter().enumerate() {
        let sd = c.sess(lo, hi);
        if sd != s {
            c.put_pick(sd, &b.all("s"), &[("show", shows[1 + i])]);
        }
    }
    let q = fill(c.rng.pick(&b.vals("q")), &[("np", e[1])]);
    c.q("temporal", q, vec![he, hs]);
}

fn t_ago(c: &mut Conv, bank: &[Sec], e: &[&str]) {
    let n = c.dates.len();
    let s = c.sess(0, n - 1);
    let h = c.put(s, e[0]);
    let q = fill(c.rng.pick(&find(bank, "ago").vals("q")), &[("vp", e[2])]);
    c.q("temporal", q, vec![h]);
}

const FILLER_TOPICS: [&str; 9] = [
    "cooking", "travel", "work", "fitness", "books", "tech", "home", "money", "mood",
];

/// Lays out the placed items of each session among greeting, filler and acknowledgement turns,
/// and returns the turn id of every handle.
fn assemble(c: &mut Conv, cid: &str, filler: &[Sec]) -> (Vec<Session>, Vec<Vec<String>>) {
    let greet = find(filler, "greet");
    let ack = find(filler, "ack").vals("a");
    let mut sessions = Vec::new();
    let mut ids = Vec::new();
    for (si, items) in std::mem::take(&mut c.items).into_iter().enumerate() {
        let nu = items.iter().filter(|i| i.user).count();
        let na = items.len() - nu;
        let need = 2 * (nu + na + 1);
        let len = c.rng.range(10, 30).max(need.min(30)).max(need);
        let len = len + len % 2;
        let pairs = len / 2;
        // Pair slots 1..pairs: each holds a user item, an assistant item, or filler.
        let mut slots: Vec<usize> = (1..pairs).collect();
        c.rng.shuffle(&mut slots);
        let mut user_at: Vec<Option<usize>> = vec![None; pairs];
        let mut asst_at: Vec<Option<usize>> = vec![None; pairs];
        let (mut ui, mut ai) = (0, 0);
        let mut take: Vec<usize> = slots[..nu + na].to_vec();
        take.sort_unstable();
        for (k, it) in items.iter().enumerate() {
            if it.user {
                user_at[take[ui]] = Some(k);
                ui += 1;
            }
        }
        for (k, it) in items.iter().enumerate() {
            if !it.user {
                asst_at[take[nu + ai]] = Some(k);
                ai += 1;
            }
        }
        let topics = [c.rng.pick(&FILLER_TOPICS), c.rng.pick(&FILLER_TOPICS)];
        let sid = format!("{cid}-s{:02}", si + 1);
        let mut turns = Vec::new();
        let mut map = vec![String::new(); items.len()];
        for p in 0..pairs {
            let topic = find(filler, topics[p % 2]);
            let (us, as_) = (topic.vals("u"), topic.vals("a"));
            let fi = c.rng.below(us.len().min(as_.len()));
            let (ut, at) = if p == 0 {
                (
                    cap(c.rng.pick(&greet.vals("u"))),
                    c.rng.pick(&greet.vals("a")).to_string(),
                )
            } else if let Some(k) = user_at[p] {
                (items[k].text.clone(), c.rng.pick(&ack).to_string())
            } else if let Some(k) = asst_at[p] {
                (cap(us[fi]), items[k].text.clone())
            } else {
                (cap(us[fi]), as_[fi].to_string())
            };
            for (user, text) in [(true, ut), (false, at)] {
                let id = format!("{sid}-t{:02}", turns.len() + 1);
                let k = if user { user_at[p] } else { asst_at[p] };
                if let Some(k) = k {
                    map[k] = id.clone();
                }
                turns.push(Turn {
                    id,
                    speaker: if user { "user" } else { "assistant" }.to_string(),
                    text,
                });
            }
        }
        ids.push(map);
        sessions.push(Session {
            id: sid,
            date: fmt_date(c.dates[si]),
            turns,
        });
    }
    (sessions, ids)
}

fn conversation(seed: &str, ci: usize, banks: &[Vec<Sec>; 3]) -> (Conversation, Vec<Question>) {
    let [facts, bank, filler] = banks;
    let cid = format!("c{:02}", ci + 1);
    let mut rng = Rng::new(seed, &cid);
    let n = rng.range(8, 15);
    let span = rng.range(180, 540) as i64;
    let start = days_from_civil(2023, 1, 1) + rng.below(540) as i64;
    let mut dates = vec![start];
    let gap = span / (n as i64 - 1);
    for _ in 1..n {
        let jitter = rng.below((gap / 2) as usize + 1) as i64 - gap / 4;
        let last = *dates.last().unwrap_or(&start);
        dates.push(last + (gap + jitter).max(5));
    }
    let qdate = dates[n - 1] + rng.range(1, 21) as i64;
    let mut c = Conv {
        rng,
        dates,
        items: (0..n).map(|_| Vec::new()).collect(),
        qs: Vec::new(),
        names: find(bank, "names").vals("v"),
        all_names: find(bank, "names").vals("v"),
    };
    // Update questions first: they decide which single fact types are left out.
    let mut ups: Vec<(&str, &str)> = UPDATES.to_vec();
    c.rng.shuffle(&mut ups);
    ups.truncate(3);
    for (key, _) in &ups {
        update(&mut c, find(bank, key));
    }
    let mut singles: Vec<&Sec> = facts
        .iter()
        .filter(|f| ups.iter().all(|(_, ex)| *ex != f.key))
        .collect();
    c.rng.shuffle(&mut singles);
    for f in singles.iter().take(11) {
        single(&mut c, f);
    }
    let mut kinds = vec![
        "relmove",
        "relmove",
        "gift",
        "gift",
        "recommend",
        "recommend",
        "plants",
        "wedding",
        "wedding",
    ];
    c.rng.shuffle(&mut kinds);
    let mut used = Vec::new();
    for k in kinds.iter().take(7) {
        if *k == "plants" {
            plants(&mut c, find(bank, k));
        } else {
            multi(&mut c, find(bank, k), &mut used);
        }
    }
    t_trip(&mut c, bank);
    t_book(&mut c, bank, qdate);
    let mut pu = Vec::new();
    t_pair(&mut c, bank, &mut pu);
    t_pair(&mut c, bank, &mut pu);
    let ev = events(&mut c, bank);
    t_order(&mut c, bank, &ev[0], &ev[1]);
    t_show(&mut c, bank, &ev[2]);
    t_ago(&mut c, bank, &ev[3]);

    let (sessions, ids) = assemble(&mut c, &cid, filler);
    let questions =
        c.qs.iter()
            .enumerate()
            .map(|(qi, q)| Question {
                id: format!("{cid}-q{:02}", qi + 1),
                conversation: cid.clone(),
                text: q.text.clone(),
                date: fmt_date(qdate),
                kind: q.kind.to_string(),
                evidence: q.ev.iter().map(|&(s, k)| ids[s][k].clone()).collect(),
            })
            .collect();
    (Conversation { id: cid, sessions }, questions)
}

/// The whole data set: `conversations` conversations, deterministic in `seed`.
pub fn generate(seed: &str, conversations: usize) -> Dataset {
    let banks = [parse(FACTS), parse(BANK), parse(FILLER)];
    let mut d = Dataset {
        conversations: Vec::new(),
        questions: Vec::new(),
    };
    for ci in 0..conversations {
        let (c, qs) = conversation(seed, ci, &banks);
        d.conversations.push(c);
        d.questions.extend(qs);
    }
    d
}

const STOP: &str = "a an the i my me we our you your is are was were be been do did does what which who whom whose where when why how to of in on at for with and or that this it its have has had am from by about as into up so if can could would will just now these those there their they them he she his her him than then some any many much not no s m ve re ll d t again remind tell days";

fn words(s: &str) -> Vec<String> {
    s.to_lowercase()
        .split(|ch: char| !ch.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOP.split(' ').any(|x| x == *w))
        .map(str::to_string)
        .collect()
}

/// Fraction of the question's content words found in its evidence turns.
fn overlap(q: &Question, turns: &std::collections::HashMap<&str, &str>) -> f64 {
    let qw = words(&q.text);
    if qw.is_empty() {
        return 0.0;
    }
    let ev: std::collections::HashSet<String> = q
        .evidence
        .iter()
        .flat_map(|id| words(turns.get(id.as_str()).copied().unwrap_or("")))
        .collect();
    qw.iter().filter(|w| ev.contains(*w)).count() as f64 / qw.len() as f64
}

/// Counts per kind, turns, sessions, mean evidence and lexical overlap.
pub fn stats(d: &Dataset) -> String {
    let turns: std::collections::HashMap<&str, &str> = d
        .conversations
        .iter()
        .flat_map(|c| c.sessions.iter())
        .flat_map(|s| s.turns.iter())
        .map(|t| (t.id.as_str(), t.text.as_str()))
        .collect();
    let sessions: usize = d.conversations.iter().map(|c| c.sessions.len()).sum();
    let lens: Vec<usize> = d
        .conversations
        .iter()
        .flat_map(|c| c.sessions.iter().map(|s| s.turns.len()))
        .collect();
    let nq = d.questions.len().max(1) as f64;
    let mut out = format!(
        "conversations {}  sessions {}  turns {} (per session {}-{})  questions {}\n",
        d.conversations.len(),
        sessions,
        turns.len(),
        lens.iter().min().unwrap_or(&0),
        lens.iter().max().unwrap_or(&0),
        d.questions.len()
    );
    for k in ["single", "multi", "temporal", "update"] {
        let qs: Vec<&Question> = d.questions.iter().filter(|q| q.kind == k).collect();
        let ev: usize = qs.iter().map(|q| q.evidence.len()).sum();
        out += &format!(
            "  {k:<9} {:>5} ({:>4.1}%)  avg evidence {:.2}\n",
            qs.len(),
            100.0 * qs.len() as f64 / nq,
            ev as f64 / qs.len().max(1) as f64
        );
    }
    let ov: Vec<f64> = d.questions.iter().map(|q| overlap(q, &turns)).collect();
    let ev: usize = d.questions.iter().map(|q| q.evidence.len()).sum();
    let share = |f: &dyn Fn(f64) -> bool| 100.0 * ov.iter().filter(|&&x| f(x)).count() as f64 / nq;
    out += &format!(
        "avg evidence {:.2}\nlexical overlap (question content words in evidence): mean {:.3}  =0: {:.1}%  <0.5: {:.1}%  >=0.5: {:.1}%\n",
        ev as f64 / nq,
        ov.iter().sum::<f64>() / nq,
        share(&|x| x == 0.0),
        share(&|x| x < 0.5),
        share(&|x| x >= 0.5)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn deterministic() {
        let a = serde_json::to_string(&generate("t", 3)).unwrap();
        let b = serde_json::to_string(&generate("t", 3)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, serde_json::to_string(&generate("u", 3)).unwrap());
    }

    #[test]
    fn forty_conversations_are_consistent() {
        let d = generate("convmem-v1", 40);
        assert!(d.questions.len() >= 1000, "{}", d.questions.len());
        let mut seen = HashSet::new();
        let mut owner: HashMap<&str, (&str, &str)> = HashMap::new();
        for c in &d.conversations {
            assert!((8..=15).contains(&c.sessions.len()));
            for w in c.sessions.windows(2) {
                assert!(w[0].date < w[1].date, "{} {}", w[0].date, w[1].date);
            }
            for s in &c.sessions {
                assert!(
                    (10..=30).contains(&s.turns.len()),
                    "{} {}",
                    s.id,
                    s.turns.len()
                );
                for t in &s.turns {
                    assert!(seen.insert(t.id.clone()), "duplicate {}", t.id);
                    owner.insert(&t.id, (&c.id, &s.date));
                }
            }
        }
        for q in &d.questions {
            assert!(!q.evidence.is_empty(), "{}", q.id);
            for e in &q.evidence {
                let (c, date) = owner.get(e.as_str()).unwrap_or_else(|| panic!("{e}"));
                assert_eq!(*c, q.conversation);
                assert!(q.date.as_str() >= *date);
            }
        }
        let s = stats(&d);
        let mean: f64 = s
            .split("mean ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(mean < 0.35, "{s}");
    }

    #[test]
    fn dates_round_trip() {
        for z in [-1000, 0, 19_000, 20_000, 20_500] {
            let (y, m, d) = civil(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(fmt_date(days_from_civil(2024, 2, 29)), "2024-02-29");
    }

    #[test]
    fn long_file_is_marked() {
        let src = include_str!("convmem.rs");
        assert!(src.lines().count() <= 400 || src.starts_with("//! Long file: "));
    }
}
